// Package fleetclient connects a Go trainer to a fleet session that
// `kubectl sandbox-fleet serve` serves: it returns the generated Connect
// client of the fleet session API (api/fleet/v1), dialing the address serve
// printed — a unix socket or http(s)://HOST:PORT — with serve's bearer
// token, if any, and a key of the client's own (fleetv1.ClientKeyHeader)
// that binds the client ids it names to it.
//
// A call made while nothing listens at the address — serve restarting, as
// `serve --resume` does after its process died — waits for it to listen
// again (WithReconnect), and an Acquire with a request id whose
// connection broke is sent again, so it never takes two sandboxes.
//
//	c, err := fleetclient.New("unix:///tmp/sandbox-fleet-run-1/serve.sock")
//	resp, err := c.Acquire(ctx, connect.NewRequest(&fleetv1.AcquireRequest{
//		RequestId: uuid, ClientId: "trainer-0", TaskId: "t1"}))
package fleetclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
)

// Option configures New.
type Option func(*options)

type options struct {
	token, key string
	http       *http.Client
	reconnect  time.Duration
}

// DefaultReconnect is how long a call waits for a server that is not
// listening, unless WithReconnect says otherwise.
const DefaultReconnect = time.Minute

// WithReconnect sets how long a call waits for a server that nothing
// listens for (a restart) before it fails; 0 does not wait. It applies
// to the connections New makes, not to those of WithHTTPClient's client.
func WithReconnect(d time.Duration) Option { return func(o *options) { o.reconnect = d } }

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
	o := options{reconnect: DefaultReconnect}
	for _, opt := range opts {
		opt(&o)
	}
	base := address
	httpClient := o.http
	if path, ok := strings.CutPrefix(address, "unix://"); ok || strings.HasPrefix(address, "/") {
		if !ok {
			path = address
		}
		dial := redial(o.reconnect)
		httpClient = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx, "unix", path) },
		}}
		base = "http://localhost"
	} else if !strings.HasPrefix(address, "http://") && !strings.HasPrefix(address, "https://") {
		return nil, fmt.Errorf("address %q: use unix:///PATH, a socket path, or http(s)://HOST:PORT", address)
	}
	if httpClient == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = redial(o.reconnect)
		httpClient = &http.Client{Transport: t}
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
	return fleetv1connect.NewFleetServiceClient(httpClient, base, connect.WithInterceptors(h, retryAcquire{})), nil
}

// redial dials, and while nothing listens at the address dials again, for
// within at most or until ctx ends: no request was sent, so none is
// repeated.
func redial(within time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		deadline := time.Now().Add(within)
		pause := 20 * time.Millisecond
		for {
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil || !notListening(err) || time.Now().After(deadline) {
				return conn, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(pause):
			}
			pause = min(2*pause, 500*time.Millisecond)
		}
	}
}

// notListening reports whether err says nothing listens at the address:
// a TCP port refused, a unix socket not there (or refused).
func notListening(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// acquireRetries is how many times an Acquire whose connection broke is
// sent again.
const acquireRetries = 3

// retryAcquire sends an Acquire with a request id again when its
// connection broke (the server died under it) — Unavailable without the
// verdict a server's own failure carries: the server finds the first try
// by its request id, so the retry takes no second sandbox.
type retryAcquire struct{}

func (retryAcquire) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		m, ok := req.Any().(*fleetv1.AcquireRequest)
		if !ok || m.RequestId == "" {
			return next(ctx, req)
		}
		for try := 0; ; try++ {
			resp, err := next(ctx, req)
			var cerr *connect.Error
			if !errors.As(err, &cerr) || cerr.Code() != connect.CodeUnavailable || cerr.Meta().Get(fleetv1.VerdictHeader) != "" ||
				try == acquireRetries || ctx.Err() != nil {
				return resp, err
			}
		}
	}
}

func (retryAcquire) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (retryAcquire) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// headers are set on every call, unary and streaming: the bearer token
// and the client's key.
type headers map[string]string

func (h headers) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		for k, v := range h {
			req.Header().Set(k, v)
		}
		// net/http sends a request again on a new connection when the
		// server had closed the kept-alive one it went out on before
		// reading it — as a restarted serve has closed them all — but
		// only a request it may replay: one carrying this header. It
		// replays nothing the server may have read.
		req.Header().Set("Idempotency-Key", "unread-retry")
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
