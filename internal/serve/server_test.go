package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
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
		{fmt.Errorf("%w: another's", session.ErrForeign), connect.CodePermissionDenied, "", fleetv1.ReasonForeign},
		{session.ErrClosed, connect.CodeFailedPrecondition, "", fleetv1.ReasonClosed},
		{fmt.Errorf("%w: tar exited 2", session.ErrFailed), connect.CodeFailedPrecondition, "", fleetv1.ReasonFailed},
		{fmt.Errorf("%w: pool of x", session.ErrNotWarming), connect.CodeFailedPrecondition, "", fleetv1.ReasonNotWarming},
		{verdict.Infrastructure(verdict.Start, &verdict.StartError{TaskID: "t"}), connect.CodeFailedPrecondition, verdict.Infra, verdict.Start},
		{verdict.Infrastructure(verdict.Lost, &verdict.LostError{TaskID: "t"}), connect.CodeAborted, verdict.Infra, verdict.Lost},
		{verdict.Infrastructure(verdict.Timeout, context.DeadlineExceeded), connect.CodeDeadlineExceeded, verdict.Infra, verdict.Timeout},
		{verdict.Infrastructure(verdict.API, errors.New("conn refused")), connect.CodeUnavailable, verdict.Infra, verdict.API},
		{verdict.Infrastructure(verdict.Exec, errors.New("no shell")), connect.CodeInternal, verdict.Infra, verdict.Exec},
		{context.Canceled, connect.CodeCanceled, "", ""},
	} {
		var cerr *connect.Error
		if !errors.As(toConnect(tc.err), &cerr) {
			t.Fatalf("toConnect(%v) is no connect error", tc.err)
		}
		if cerr.Code() != tc.code || cerr.Meta().Get(fleetv1.VerdictHeader) != tc.verdict || cerr.Meta().Get(fleetv1.ReasonHeader) != tc.cause {
			t.Errorf("toConnect(%v) = %v, verdict %q, reason %q; want %v, %q, %q", tc.err, cerr.Code(),
				cerr.Meta().Get(fleetv1.VerdictHeader), cerr.Meta().Get(fleetv1.ReasonHeader), tc.code, tc.verdict, tc.cause)
		}
	}
}

func TestListenRefusesUnguardedAddresses(t *testing.T) {
	for _, a := range []Access{
		{Address: "127.0.0.1:0"},                   // any user of the machine can reach it
		{Address: "0.0.0.0:0", Token: "t"},         // the token would cross the network in the clear
		{Address: "nonsense", Token: "t"},          // neither a socket path nor HOST:PORT
		{Address: "/proc/no-such/dir/s.sock"},      // cannot be made
		{Address: filepath.Join(shared(t), "s")},   // others may write the directory
		{Address: filepath.Join(readable(t), "s")}, // others may enter the directory
	} {
		if l, _, err := Listen(a); err == nil {
			l.Close()
			t.Errorf("Listen(%+v) was allowed", a)
		}
	}
	l, addr, err := Listen(Access{Address: "127.0.0.1:0", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if addr[:7] != "http://" {
		t.Errorf("address %q", addr)
	}
	_, _, err = Listen(Access{Address: filepath.Join(shared(t), "s")})
	if err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("a socket in a shared directory: %v, want a refusal saying what to do", err)
	}
	socket := filepath.Join(t.TempDir(), "private", "s.sock")
	l, _, err = Listen(Access{Address: socket})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket is %v (%v), want mode 0600", fi.Mode(), err)
	}
}

// shared is a directory every user may write, as /tmp is.
func shared(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readable is a directory of this user's that others may list and enter.
func readable(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestResolveToken(t *testing.T) {
	dir := t.TempDir()
	// Over TCP without a file: a fresh token in a private file.
	a := Access{Address: "127.0.0.1:0"}
	file, cleanup, err := ResolveToken(&a, "")
	if err != nil || len(a.Token) != 64 {
		t.Fatalf("ResolveToken = %q, token %q, %v", file, a.Token, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the generated token file is %v (%v), want 0600", fi, err)
	}
	cleanup()
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the generated token file outlives the session: %v", err)
	}
	// A named file that does not exist is written; one that does is read.
	named := filepath.Join(dir, "token")
	a = Access{Address: "127.0.0.1:0"}
	if _, _, err := ResolveToken(&a, named); err != nil {
		t.Fatal(err)
	}
	b := Access{Address: "127.0.0.1:0"}
	if _, _, err := ResolveToken(&b, named); err != nil || b.Token != a.Token {
		t.Errorf("reading the written token: %q, %v; want %q", b.Token, err, a.Token)
	}
	// A unix socket needs none; a token others can read is refused.
	u := Access{Address: filepath.Join(dir, "s.sock")}
	if file, _, err := ResolveToken(&u, ""); err != nil || file != "" || u.Token != "" {
		t.Errorf("a unix socket got token file %q, %q, %v", file, u.Token, err)
	}
	if err := os.Chmod(named, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ResolveToken(&b, named); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a token file others can read: %v, want refused", err)
	}
}

// Which reviewed users the allowed accounts admit.
func TestAllowed(t *testing.T) {
	accounts := []string{"rl/trainer", "workers/*"}
	for _, tc := range []struct {
		user string
		want bool
	}{
		{"system:serviceaccount:rl:trainer", true},
		{"system:serviceaccount:rl:other", false},
		{"system:serviceaccount:workers:ray-worker-7", true},
		{"system:serviceaccount:workersx:a", false},
		{"system:serviceaccount:rl", false},
		{"alice", false},
		{"system:node:rl:trainer", false},
	} {
		if got := allowed(tc.user, accounts); got != tc.want {
			t.Errorf("allowed(%q) = %v, want %v", tc.user, got, tc.want)
		}
	}
	for s, ok := range map[string]bool{"rl/trainer": true, "rl/*": true, "trainer": false, "/x": false, "rl/": false, "a/b/c": false,
		"TRAINER_NAMESPACE/sandbox-fleet-trainer": false, "rl/Trainer": false} {
		if err := ParseAccount(s); (err == nil) != ok {
			t.Errorf("ParseAccount(%q) = %v, want ok %v", s, err, ok)
		}
	}
}
