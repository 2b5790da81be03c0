package fleetclient_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
	"github.com/sandbox-fleet/sandbox-fleet/internal/serve"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleetclient"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// startSession serves a session of its own on kwok nodes, as serve does,
// and returns it and a func that stops serving it (not the session);
// everything of it is torn down when the test ends.
func startSession(t *testing.T, ctx context.Context, access serve.Access) (*serve.Service, string, func()) {
	t.Helper()
	clients, err := cluster.Clients(cluster.NewNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.MaxConcurrent, cfg.MaxWarmPoolSize = 4, 2
	s, err := session.Open(ctx, "go-client", cfg, nil, []fleet.Target{{Config: config.Cluster{Name: "kwok", Weight: 1}, Clients: clients}}, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := serve.NewService(s)
	l, addr, err := serve.Listen(access)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serve.Serve(sctx, l, v, access) }()
	stopServing := sync.OnceFunc(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serving: %v", err)
		}
	})
	t.Cleanup(func() {
		stopServing()
		if err := v.Shutdown(context.Background()); err != nil {
			t.Errorf("closing the session: %v", err)
		}
		left, err := s.Fleet().Leftovers(context.Background())
		if err != nil || len(left) > 0 {
			t.Errorf("after Close: %v left (%v)", left, err)
		}
	})
	return v, addr, stopServing
}

func code(err error) connect.Code {
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		return cerr.Code()
	}
	return 0
}

// socketDir is a directory only this user may enter, as serve requires of
// a socket's (t.TempDir makes them 0755).
func socketDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The Go client over a unix socket: the plan grows, pools warm, a retried
// Acquire gets the same sandbox, and bad requests get precise errors.
func TestSessionOverUnixSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, addr, _ := startSession(t, ctx, serve.Access{Address: filepath.Join(socketDir(t), "s.sock")})
	c, err := fleetclient.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	added, err := c.AddTasks(ctx, connect.NewRequest(&fleetv1.AddTasksRequest{Tasks: []*fleetv1.Task{
		{Id: "a", Image: "registry.example/a:1"}, {Id: "b", Image: "registry.example/a:1"}, {Id: "c", Image: "registry.example/c:1"},
	}}))
	if err != nil || added.Msg.Total != 3 || len(added.Msg.Pools) != 2 {
		t.Fatalf("AddTasks = %v, %v; want 3 tasks over 2 new pools", added, err)
	}
	if _, err := c.Lookahead(ctx, connect.NewRequest(&fleetv1.LookaheadRequest{TaskIds: []string{"a", "c"}})); err != nil {
		t.Fatal(err)
	}
	ready, err := c.WaitPoolsReady(ctx, connect.NewRequest(&fleetv1.WaitPoolsReadyRequest{Timeout: durationpb.New(time.Minute)}))
	if err != nil || !ready.Msg.Ready {
		t.Fatalf("WaitPoolsReady = %v, %v", ready, err)
	}

	// Two calls with one request id, at once: one sandbox.
	req := &fleetv1.AcquireRequest{RequestId: "r1", ClientId: "go", TaskId: "a"}
	ids := make([]string, 2)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			resp, err := c.Acquire(ctx, connect.NewRequest(req))
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			ids[i] = resp.Msg.Handle.Id
		})
	}
	wg.Wait()
	if ids[0] == "" || ids[0] != ids[1] {
		t.Fatalf("a retried Acquire got %q and %q, want one sandbox", ids[0], ids[1])
	}
	st, err := c.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{}))
	if err != nil || len(st.Msg.Handles) != 1 || st.Msg.Counts.Acquired != 1 {
		t.Fatalf("Status = %v, %v; want one handle", st, err)
	}

	for _, tc := range []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"an unknown task", func() error {
			_, err := c.Acquire(ctx, connect.NewRequest(&fleetv1.AcquireRequest{ClientId: "go", TaskId: "nope"}))
			return err
		}, connect.CodeNotFound},
		{"no client id", func() error {
			_, err := c.Acquire(ctx, connect.NewRequest(&fleetv1.AcquireRequest{TaskId: "a"}))
			return err
		}, connect.CodeInvalidArgument},
		{"a request id reused for another task", func() error {
			_, err := c.Acquire(ctx, connect.NewRequest(&fleetv1.AcquireRequest{RequestId: "r1", ClientId: "go", TaskId: "c"}))
			return err
		}, connect.CodeInvalidArgument},
		{"a foreign handle", func() error {
			_, err := c.Release(ctx, connect.NewRequest(&fleetv1.ReleaseRequest{Handle: ids[0], ClientId: "someone-else"}))
			return err
		}, connect.CodePermissionDenied},
		{"no timeout", func() error {
			_, err := c.WaitPoolsReady(ctx, connect.NewRequest(&fleetv1.WaitPoolsReadyRequest{}))
			return err
		}, connect.CodeInvalidArgument},
		{"a bad image", func() error {
			_, err := c.AddTasks(ctx, connect.NewRequest(&fleetv1.AddTasksRequest{Tasks: []*fleetv1.Task{{Id: "x", Image: "Bad Image"}}}))
			return err
		}, connect.CodeInvalidArgument},
	} {
		if err := tc.call(); code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	st, err = c.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{}))
	if err != nil || len(st.Msg.Handles) != 1 || st.Msg.Tasks != 3 {
		t.Fatalf("bad requests changed the session: %v, %v", st, err)
	}
	// Another caller naming this client's id, without its key, is refused
	// and changes nothing; nor may it close the session it does not own.
	other, err := fleetclient.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Release(ctx, connect.NewRequest(&fleetv1.ReleaseRequest{Handle: ids[0], ClientId: "go"})); code(err) != connect.CodePermissionDenied {
		t.Errorf("another caller's Release under this client's id: %v, want permission_denied", err)
	}
	if stream, err := other.Exec(ctx, connect.NewRequest(&fleetv1.ExecRequest{Handle: ids[0], ClientId: "go", Argv: []string{"true"}})); err != nil {
		t.Fatal(err)
	} else if stream.Receive() || code(stream.Err()) != connect.CodePermissionDenied {
		t.Errorf("another caller's Exec under this client's id: %v, want permission_denied", stream.Err())
	}
	if _, err := other.Close(ctx, connect.NewRequest(&fleetv1.CloseRequest{ClientId: "someone-else"})); code(err) != connect.CodePermissionDenied {
		t.Errorf("Close by a client that does not own the session: %v, want permission_denied", err)
	}
	if st, err := c.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{})); err != nil || len(st.Msg.Handles) != 1 {
		t.Fatalf("another caller changed the session: %v, %v", st, err)
	}
	if _, err := c.Release(ctx, connect.NewRequest(&fleetv1.ReleaseRequest{Handle: ids[0], ClientId: "go"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Close(ctx, connect.NewRequest(&fleetv1.CloseRequest{ClientId: "go"})); err != nil {
		t.Fatal(err)
	}
}

// Beyond loopback and unix sockets, every call must carry the token, best
// over TLS.
func TestTokenOverTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	certFile, keyFile, pool := selfSigned(t)
	_, addr, _ := startSession(t, ctx, serve.Access{Address: "127.0.0.1:0", Token: "s3cret", CertFile: certFile, KeyFile: keyFile})
	if !strings.HasPrefix(addr, "https://") {
		t.Fatalf("address %q, want https", addr)
	}
	tlsClient := fleetclient.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}})
	for _, tc := range []struct {
		opts []fleetclient.Option
		want connect.Code
	}{
		{[]fleetclient.Option{tlsClient}, connect.CodeUnauthenticated},
		{[]fleetclient.Option{tlsClient, fleetclient.WithToken("wrong")}, connect.CodeUnauthenticated},
		{[]fleetclient.Option{tlsClient, fleetclient.WithToken("s3cret")}, 0},
		{[]fleetclient.Option{fleetclient.WithToken("s3cret")}, connect.CodeUnavailable}, // the server's certificate is not trusted
	} {
		c, err := fleetclient.New(addr, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{}))
		if code(err) != tc.want {
			t.Errorf("with %d options: %v, want code %v", len(tc.opts), err, tc.want)
		}
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns a
// pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	caFile, certFile, keyFile, err := testcluster.ServingCert(t.TempDir(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return certFile, keyFile, pool
}

// A call made while serve restarts waits for it to listen again, and is
// made once: the client's reconnect, on the real server.
func TestCallsWaitForARestartingServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	access := serve.Access{Address: filepath.Join(socketDir(t), "s.sock")}
	v, addr, stopServing := startSession(t, ctx, access)
	c, err := fleetclient.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx, connect.NewRequest(&fleetv1.RenewRequest{ClientId: "go"})); err != nil {
		t.Fatal(err)
	}
	// serve stops listening, as a killed one does, and starts again
	// after the call below was made.
	stopServing()
	sctx, stopSecond := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		l, _, err := serve.Listen(access)
		if err != nil {
			served <- err
			return
		}
		served <- serve.Serve(sctx, l, v, access)
	}()
	start := time.Now()
	_, err = c.Renew(ctx, connect.NewRequest(&fleetv1.RenewRequest{ClientId: "go"}))
	waited := time.Since(start)
	stopSecond()
	if serr := <-served; serr != nil {
		t.Errorf("serving again: %v", serr)
	}
	if err != nil {
		t.Fatalf("a call while serve restarts: %v", err)
	}
	if waited < 500*time.Millisecond {
		t.Errorf("the call returned after %v, before serve listened again", waited)
	}
	quick, _ := fleetclient.New(filepath.Join(t.TempDir(), "none.sock"), fleetclient.WithReconnect(0))
	if _, err := quick.Renew(ctx, connect.NewRequest(&fleetv1.RenewRequest{ClientId: "go"})); code(err) != connect.CodeUnavailable {
		t.Errorf("a call to nothing, without reconnect: %v, want Unavailable at once", err)
	}
}

// accountToken is a token of ServiceAccount ns/account (made if missing)
// for audiences (none: the API server's).
func accountToken(t *testing.T, ctx context.Context, admin *kube.Clients, ns, account string, audiences ...string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}
	if _, err := admin.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := admin.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, account,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// reviewCounter counts the TokenReviews serve asks of the API server.
type reviewCounter struct {
	authenticationv1client.TokenReviewInterface
	n atomic.Int64
}

func (c *reviewCounter) Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	c.n.Add(1)
	return c.TokenReviewInterface.Create(ctx, tr, opts)
}

// A thousand calls with made-up tokens from one caller cost the API server
// no more TokenReviews than serve's bound for a caller (its burst, and its
// rate for the time they took), are refused as resource_exhausted past
// it, and the allowed account, reviewed before, is served all along.
func TestTokenReviewsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := cluster.Clients("default")
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.NewNamespace(t)
	trainerToken := accountToken(t, ctx, admin, ns, "trainer", serve.DefaultAudience)
	reviews := &reviewCounter{TokenReviewInterface: admin.Kube.AuthenticationV1().TokenReviews()}
	_, addr, _ := startSession(t, ctx, serve.Access{Address: "127.0.0.1:0", Kube: &serve.KubeAuth{
		Reviews: reviews, Audience: serve.DefaultAudience, Allowed: []string{ns + "/trainer"}}})
	trainer, _ := fleetclient.New(addr, fleetclient.WithToken(trainerToken))
	status := func(c fleetv1connect.FleetServiceClient) error {
		_, err := c.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{}))
		return err
	}
	if err := status(trainer); err != nil {
		t.Fatal(err)
	}
	reviews.n.Store(0)
	start := time.Now()
	var exhausted atomic.Int64
	var wg sync.WaitGroup
	calls := make(chan int)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				c, _ := fleetclient.New(addr, fleetclient.WithToken(fmt.Sprintf("made-up-%d", i)))
				if code(status(c)) == connect.CodeResourceExhausted {
					exhausted.Add(1)
				}
			}
		}()
	}
	served := make(chan error, 1)
	go func() {
		var err error
		for range 20 {
			if err = status(trainer); err != nil {
				break
			}
		}
		served <- err
	}()
	for i := range 1000 {
		calls <- i
	}
	close(calls)
	wg.Wait()
	elapsed := time.Since(start)
	if err := <-served; err != nil {
		t.Errorf("the allowed account during the flood: %v", err)
	}
	bound := int64(serve.DefaultReviewBurst + serve.DefaultReviewsPerSecond*elapsed.Seconds() + 1)
	if n := reviews.n.Load(); n > bound {
		t.Errorf("1000 made-up tokens in %s caused %d TokenReviews, want at most %d", elapsed, n, bound)
	}
	if exhausted.Load() < 1000-bound {
		t.Errorf("%d of the calls were refused as resource_exhausted, want all but at most %d", exhausted.Load(), bound)
	}
}

// serve admitting ServiceAccounts: a caller is who its token says, as the
// API server reviews it for serve's audience; an account not allowed is
// refused and changes nothing, as is a token for another audience (a
// Pod's API token) and none at all.
func TestServiceAccountsAdmitted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := cluster.Clients("default")
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.NewNamespace(t)
	token := func(account string, audiences ...string) string {
		t.Helper()
		return accountToken(t, ctx, admin, ns, account, audiences...)
	}
	_, addr, _ := startSession(t, ctx, serve.Access{Address: "127.0.0.1:0", Kube: &serve.KubeAuth{
		Reviews: admin.Kube.AuthenticationV1().TokenReviews(), Audience: serve.DefaultAudience, Allowed: []string{ns + "/trainer"}}})
	add := func(c fleetv1connect.FleetServiceClient) error {
		_, err := c.AddTasks(ctx, connect.NewRequest(&fleetv1.AddTasksRequest{Tasks: []*fleetv1.Task{{Id: "t1", Image: "registry.example/a:1"}}}))
		return err
	}
	trainer, _ := fleetclient.New(addr, fleetclient.WithToken(token("trainer", serve.DefaultAudience)))
	if err := add(trainer); err != nil {
		t.Fatalf("the allowed account: %v", err)
	}
	for _, tc := range []struct {
		name  string
		token string
		want  connect.Code
	}{
		{"another account", token("intruder", serve.DefaultAudience), connect.CodePermissionDenied},
		{"the allowed account's API token", token("trainer"), connect.CodeUnauthenticated},
		{"no token", "", connect.CodeUnauthenticated},
		{"a made-up token", "not-a-token", connect.CodeUnauthenticated},
	} {
		c, _ := fleetclient.New(addr, fleetclient.WithToken(tc.token))
		if err := add(c); code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	st, err := trainer.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{}))
	if err != nil || st.Msg.Tasks != 1 {
		t.Errorf("after the refused calls: %v tasks (%v), want the 1 the trainer added", st.Msg.GetTasks(), err)
	}
}

// Large calls from many callers at once cost serve no more than its body
// budget: sixteen concurrent 64 MiB calls to a serve process leave its
// peak memory under the shipped Deployment's 1 GiB limit, those past the
// budget are refused as resource_exhausted, and serve answers its callers
// after.
func TestLargeCallsWithinServesMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	plugin, err := testcluster.BuildCommand(t.TempDir(), "kubectl-sandbox_fleet")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "serve.sock")
	cmd := exec.Command(plugin, "--kubeconfig", cluster.Kubeconfig(), "serve", "-n", cluster.NewNamespace(t), "--listen", "unix://"+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatalf("serve printed no address: %v", err)
	}
	httpc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	// One row, not valid JSON, of a 64 MiB message: read whole and decoded,
	// then refused.
	body := append(append([]byte(`{"rows":["{`), bytes.Repeat([]byte("x"), 64<<20-32)...), []byte(`"]}`)...)
	codes := make([]int, 16)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://serve/sandboxfleet.fleet.v1.FleetService/AddTasks", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := httpc.Do(req)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	refused := 0
	for _, c := range codes {
		switch c {
		case http.StatusTooManyRequests:
			refused++
		case http.StatusBadRequest:
		default:
			t.Errorf("a 64 MiB call: HTTP %d, want 400 (its row refused) or 429 (past the budget)", c)
		}
	}
	if refused == 0 {
		t.Errorf("none of 16 concurrent 64 MiB calls was refused: the budget held them all (%v)", codes)
	}
	c, _ := fleetclient.New("unix://" + sock)
	if _, err := c.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{})); err != nil {
		t.Errorf("serve after the large calls: %v", err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var n int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), &n)
			t.Logf("serve's peak memory: %d MiB", n>>10)
			if n<<10 >= 1<<30 {
				t.Errorf("serve's peak memory %d MiB, want under the Deployment's 1 GiB limit", n>>10)
			}
		}
	}
}
