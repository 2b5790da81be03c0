package serve

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

func TestToConnect(t *testing.T) {
	for _, tc := range []struct {
		err            error
		code           connect.Code
		verdict, cause string
	}{
		{fmt.Errorf("%w: no task", session.ErrInvalid), connect.CodeInvalidArgument, "", ""},
		{fmt.Errorf("%w: no handle", session.ErrNotFound), connect.CodeNotFound, "", ""},
		{fmt.Errorf("%w: another's", session.ErrForeign), connect.CodePermissionDenied, "", ""},
		{session.ErrClosed, connect.CodeFailedPrecondition, "", ""},
		{verdict.Infrastructure(verdict.Start, &claim.Error{TaskID: "t"}), connect.CodeFailedPrecondition, verdict.Infra, verdict.Start},
		{verdict.Infrastructure(verdict.Lost, &claim.LostError{TaskID: "t"}), connect.CodeAborted, verdict.Infra, verdict.Lost},
		{verdict.Infrastructure(verdict.Timeout, context.DeadlineExceeded), connect.CodeDeadlineExceeded, verdict.Infra, verdict.Timeout},
		{verdict.Infrastructure(verdict.API, errors.New("conn refused")), connect.CodeUnavailable, verdict.Infra, verdict.API},
		{verdict.Infrastructure(verdict.Exec, errors.New("no shell")), connect.CodeInternal, verdict.Infra, verdict.Exec},
		{context.Canceled, connect.CodeCanceled, "", ""},
	} {
		var cerr *connect.Error
		if !errors.As(toConnect(tc.err), &cerr) {
			t.Fatalf("toConnect(%v) is no connect error", tc.err)
		}
		if cerr.Code() != tc.code || cerr.Meta().Get(VerdictKey) != tc.verdict || cerr.Meta().Get(ReasonKey) != tc.cause {
			t.Errorf("toConnect(%v) = %v, verdict %q, reason %q; want %v, %q, %q", tc.err, cerr.Code(),
				cerr.Meta().Get(VerdictKey), cerr.Meta().Get(ReasonKey), tc.code, tc.verdict, tc.cause)
		}
	}
}

func TestListenRefusesAnUnguardedNetworkAddress(t *testing.T) {
	if _, _, err := Listen(Access{Address: "0.0.0.0:0"}); err == nil {
		t.Fatal("listening on every interface with no token was allowed")
	}
	if _, _, err := Listen(Access{Address: "nonsense"}); err == nil {
		t.Fatal("an address that is neither a socket path nor HOST:PORT was taken")
	}
	l, addr, err := Listen(Access{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if addr[:7] != "http://" {
		t.Errorf("address %q", addr)
	}
}
