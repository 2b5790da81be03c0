package fleetclient

import (
	"context"
	"errors"
	"testing"

	"connectrpc.com/connect"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
)

// Which failed calls retryAcquire sends again: an Acquire with a request
// id whose connection broke, up to acquireRetries times; not the
// server's own failures, an Acquire without a request id, or another call.
func TestRetryAcquire(t *testing.T) {
	broken := connect.NewError(connect.CodeUnavailable, errors.New("connection reset"))
	infra := connect.NewError(connect.CodeUnavailable, errors.New("the API server did not answer"))
	infra.Meta().Set(fleetv1.VerdictHeader, "infra")
	for _, tc := range []struct {
		name  string
		msg   any
		fails []error
		calls int
		ok    bool
	}{
		{"broken once", &fleetv1.AcquireRequest{RequestId: "r1"}, []error{broken}, 2, true},
		{"broken every time", &fleetv1.AcquireRequest{RequestId: "r1"}, []error{broken, broken, broken, broken, broken}, 1 + acquireRetries, false},
		{"the server's failure", &fleetv1.AcquireRequest{RequestId: "r1"}, []error{infra}, 1, false},
		{"no request id", &fleetv1.AcquireRequest{}, []error{broken}, 1, false},
		{"another call", &fleetv1.RenewRequest{}, []error{broken}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			next := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
				calls++
				if calls <= len(tc.fails) {
					return nil, tc.fails[calls-1]
				}
				return connect.NewResponse(&fleetv1.AcquireResponse{}), nil
			}
			var req connect.AnyRequest
			switch m := tc.msg.(type) {
			case *fleetv1.AcquireRequest:
				req = connect.NewRequest(m)
			case *fleetv1.RenewRequest:
				req = connect.NewRequest(m)
			}
			_, err := retryAcquire{}.WrapUnary(next)(context.Background(), req)
			if calls != tc.calls || (err == nil) != tc.ok {
				t.Errorf("%d calls, error %v; want %d calls, ok %v", calls, err, tc.calls, tc.ok)
			}
		})
	}
}
