package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
)

// callers binds client ids to their keys and knows the session's owner:
// the first client id a call named, the only one that may Close it.
type callers struct {
	mu    sync.Mutex
	keys  map[string][sha256.Size]byte
	owner string
}

// clientIDer is every request message that names its client.
type clientIDer interface{ GetClientId() string }

// check binds the client id msg names to key on first sight, and refuses
// a call whose key is not the one bound.
func (c *callers) check(msg any, key string) error {
	m, ok := msg.(clientIDer)
	if !ok || m.GetClientId() == "" {
		return nil
	}
	id, sum := m.GetClientId(), sha256.Sum256([]byte(key))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string][sha256.Size]byte{}
	}
	bound, ok := c.keys[id]
	if !ok {
		c.keys[id] = sum
		if c.owner == "" {
			c.owner = id
		}
		return nil
	}
	if subtle.ConstantTimeCompare(bound[:], sum[:]) != 1 {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"client id %q belongs to another caller (its %s differs): use a client id of your own", id, fleetv1.ClientKeyHeader))
	}
	return nil
}

// mayClose refuses a Close by any client but the owner.
func (c *callers) mayClose(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owner != "" && id != c.owner {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"only the session's owner (client %q, the first to call it) may close it: release your sandboxes, or stop serve", c.owner))
	}
	return nil
}

// WrapUnary checks the client of a unary call.
func (c *callers) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := c.check(req.Any(), req.Header().Get(fleetv1.ClientKeyHeader)); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient leaves clients as they are.
func (*callers) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler checks the client of every message a stream
// receives.
func (c *callers) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &checkedConn{StreamingHandlerConn: conn, callers: c})
	}
}

type checkedConn struct {
	connect.StreamingHandlerConn
	callers *callers
}

func (s *checkedConn) Receive(msg any) error {
	if err := s.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return s.callers.check(msg, s.RequestHeader().Get(fleetv1.ClientKeyHeader))
}
