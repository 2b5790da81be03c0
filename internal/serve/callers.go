package serve

import (
	"context"

	"connectrpc.com/connect"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
)

// callers admits each call by the client id it names and the key it
// carries (session.Admit): the first call binds the id to the key, and no
// other caller can act on its sandboxes.
type callers struct{ session *session.Session }

// clientIDer is every request message that names its client.
type clientIDer interface{ GetClientId() string }

func (c callers) check(msg any, key string) error {
	m, ok := msg.(clientIDer)
	if !ok {
		return nil
	}
	return toConnect(c.session.Admit(m.GetClientId(), key))
}

// WrapUnary checks the client of a unary call.
func (c callers) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := c.check(req.Any(), req.Header().Get(fleetv1.ClientKeyHeader)); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient leaves clients as they are.
func (callers) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler checks the client of every message a stream
// receives.
func (c callers) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &checkedConn{StreamingHandlerConn: conn, callers: c})
	}
}

type checkedConn struct {
	connect.StreamingHandlerConn
	callers callers
}

func (s *checkedConn) Receive(msg any) error {
	if err := s.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return s.callers.check(msg, s.RequestHeader().Get(fleetv1.ClientKeyHeader))
}
