// Package fleetclient connects a Go trainer to a fleet session that
// `kubectl sandbox-fleet serve` serves: it returns the generated Connect
// client of the fleet session API (api/fleet/v1), dialing the address serve
// printed — a unix socket or http(s)://HOST:PORT — with serve's bearer
// token, if any, and a key of the client's own (fleetv1.ClientKeyHeader)
// that binds the client ids it names to it.
//
//	c, err := fleetclient.New("unix:///tmp/sandbox-fleet-run-1/serve.sock")
//	resp, err := c.Acquire(ctx, connect.NewRequest(&fleetv1.AcquireRequest{
//		RequestId: uuid, ClientId: "trainer-0", TaskId: "t1"}))
package fleetclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
)

// Option configures New.
type Option func(*options)

type options struct {
	token, key string
	http       *http.Client
}

// WithToken sends token as the bearer token of every call.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithClientKey sends key as the client's key (fleetv1.ClientKeyHeader)
// instead of a random one: clients sharing a key may act on each
// other's sandboxes under one client id.
func WithClientKey(key string) Option { return func(o *options) { o.key = key } }

// WithHTTPClient uses c (e.g. with TLS settings) for http(s) addresses.
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.http = c } }

// New returns a client of the session at address: unix:///PATH or a
// socket path, or http(s)://HOST:PORT.
func New(address string, opts ...Option) (fleetv1connect.FleetServiceClient, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	base := address
	httpClient := o.http
	if path, ok := strings.CutPrefix(address, "unix://"); ok || strings.HasPrefix(address, "/") {
		if !ok {
			path = address
		}
		var d net.Dialer
		httpClient = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", path) },
		}}
		base = "http://localhost"
	} else if !strings.HasPrefix(address, "http://") && !strings.HasPrefix(address, "https://") {
		return nil, fmt.Errorf("address %q: use unix:///PATH, a socket path, or http(s)://HOST:PORT", address)
	}
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	h := headers{}
	if o.token != "" {
		h["Authorization"] = "Bearer " + o.token
	}
	if o.key == "" {
		key := make([]byte, 16)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		o.key = hex.EncodeToString(key)
	}
	h[fleetv1.ClientKeyHeader] = o.key
	return fleetv1connect.NewFleetServiceClient(httpClient, base, connect.WithInterceptors(h)), nil
}

// headers are set on every call, unary and streaming: the bearer token
// and the client's key.
type headers map[string]string

func (h headers) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		for k, v := range h {
			req.Header().Set(k, v)
		}
		return next(ctx, req)
	}
}

func (h headers) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		for k, v := range h {
			conn.RequestHeader().Set(k, v)
		}
		return conn
	}
}

func (h headers) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
