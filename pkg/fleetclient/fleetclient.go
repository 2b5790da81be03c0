// Package fleetclient connects a Go trainer to a fleet session that
// `kubectl sandbox-fleet serve` serves: it returns the generated Connect
// client of the fleet session API (api/fleet/v1), dialing the address serve
// printed — a unix socket or http(s)://HOST:PORT — with the bearer token
// serve was given, if any.
//
//	c, err := fleetclient.New("unix:///tmp/sandbox-fleet-run-1/serve.sock")
//	resp, err := c.Acquire(ctx, connect.NewRequest(&fleetv1.AcquireRequest{
//		RequestId: uuid, ClientId: "trainer-0", TaskId: "t1"}))
package fleetclient

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
)

// Option configures New.
type Option func(*options)

type options struct {
	token string
	http  *http.Client
}

// WithToken sends token as the bearer token of every call.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

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
	var copts []connect.ClientOption
	if o.token != "" {
		copts = append(copts, connect.WithInterceptors(bearer(o.token)))
	}
	return fleetv1connect.NewFleetServiceClient(httpClient, base, copts...), nil
}

// bearer adds the token to every call, unary and streaming.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
