// Package faults is the fault suite on kwok: real runs of the built plugin
// while the test freezes, kills and restarts the components its own test
// cluster started, deletes a run's objects behind its back, and signals the
// driver. Every run must end within runBound, every task must have
// succeeded or carry an infrastructure failure, nothing of the run may be
// left, and a run beside it in the same namespace must not be touched.
// The real node's faults (its kubelet stopped, a container killed
// mid-exec) are in e2e/faults_test.go.
package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testlog"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/results"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

var (
	cluster *testcluster.Cluster
	// injected counts the faults the suite injected; TestFaultCount fails
	// a full run of the suite that injected fewer than minFaults.
	injected atomic.Int32
)

const minFaults = 30

// The cluster starts again a component that exits, as a real cluster
// would its Pod: the Agent Sandbox controller exits when the API server
// is gone longer than its leader Lease allows.
func TestMain(m *testing.M) {
	testcluster.Main(m, &cluster, testcluster.RestartingExited())
}

// The bounds the suite holds runs to. A run's tasks take about 10 s
// unhurt; a fault costs at most its own length plus the grace that gives
// up what it broke (5 s here) or, for a claim the controller never
// answers, the ready timeout (60 s here).
const (
	grace        = 5 * time.Second
	readyTimeout = time.Minute
	runBound     = 3 * time.Minute
)

var (
	pluginOnce sync.Once
	plugin     string
	pluginErr  error
)

// buildPlugin builds the kubectl plugin once for the suite, into the
// cluster's directory, which goes when the cluster stops.
func buildPlugin(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		plugin, pluginErr = testcluster.BuildCommand(cluster.Dir(), "kubectl-sandbox_fleet")
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return plugin
}

// run is one run of the plugin under test.
type run struct {
	id, ns, dir string
	tasks       int
	cmd         *exec.Cmd
	stderr      *testlog.Buffer
	exited      chan struct{}
	started     time.Time
}

// images are the four images a run's tasks use.
var images = []string{"example.com/faults/img-0:v1", "example.com/faults/img-1:v1", "example.com/faults/img-2:v1", "example.com/faults/img-3:v1"}

// startRun starts a run of n tasks over images, four at a time, each the
// local command work.
func startRun(t *testing.T, ns, id string, n int, work string, flags ...string) *run {
	t.Helper()
	dir := t.TempDir()
	var rows strings.Builder
	for i := range n {
		fmt.Fprintf(&rows, `{"id":"%s-%d","image":"%s"}`+"\n", id, i, images[i%len(images)])
	}
	if err := os.WriteFile(filepath.Join(dir, "tasks.jsonl"), []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig", cluster.Kubeconfig(), "run", "-n", ns, "--run-id", id,
		"--tasks", filepath.Join(dir, "tasks.jsonl"), "--results", filepath.Join(dir, "results.jsonl"),
		"--max-concurrent", "4", "--heartbeat", "3s", "--claim-grace", grace.String(), "--unschedulable-grace", grace.String(),
		"--ready-timeout", readyTimeout.String(), "-q", "--process", "local"}, flags...)
	cmd := exec.Command(buildPlugin(t), append(args, "--", "sh", "-c", work)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r := &run{id: id, ns: ns, dir: dir, tasks: n, cmd: cmd, stderr: &testlog.Buffer{}, exited: make(chan struct{}), started: time.Now()}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-r.exited
		}
	})
	return r
}

// sleepWork is a task of a second's work.
const sleepWork = "sleep 1"

// holdWork is a task that lasts until dir has no file "hold".
func holdWork(dir string) string {
	return fmt.Sprintf("while [ -e %s/hold ]; do sleep 0.2; done", dir)
}

// results reads the run's results so far.
func (r *run) results(t *testing.T) []fleet.Result {
	t.Helper()
	rs, err := results.Read(filepath.Join(r.dir, "results.jsonl"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return rs
}

// resultCount counts the results written so far.
func (r *run) resultCount(t *testing.T) int { return len(r.results(t)) }

// waitFor polls until cond holds or the run ends, within runBound.
func (r *run) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(runBound)
	for !cond() {
		select {
		case <-r.exited:
			t.Fatalf("run %s ended before %s:\n%s", r.id, what, r.stderr)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: no %s within %s", r.id, what, runBound)
		}
	}
}

// end waits for the run to end within runBound, and returns its exit code.
func (r *run) end(t *testing.T) int {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(runBound):
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGQUIT)
		<-r.exited
		t.Fatalf("run %s did not end within %s (SIGQUIT for its goroutines):\n%s", r.id, runBound, r.stderr)
	}
	code := r.cmd.ProcessState.ExitCode()
	t.Logf("run %s ended, exit %d, %s after it started", r.id, code, time.Since(r.started).Round(100*time.Millisecond))
	return code
}

// checkResults holds every task to the rule: it succeeded, or failed for
// the infrastructure with a reason. With complete, every task must have a
// result; a killed run leaves the rest to be resumed.
func (r *run) checkResults(t *testing.T, complete bool) (ok, infra int) {
	t.Helper()
	seen := map[string]bool{}
	for _, res := range r.results(t) {
		if seen[res.ID] {
			t.Errorf("run %s: task %s has two results", r.id, res.ID)
		}
		seen[res.ID] = true
		switch {
		case res.OK:
			ok++
		case res.Verdict == verdict.Infra && res.Reason != "":
			infra++
		default:
			t.Errorf("run %s: task %s failed, not for the infrastructure: %+v", r.id, res.ID, res)
		}
	}
	if complete && len(seen) != r.tasks {
		t.Errorf("run %s: %d of %d tasks have a result:\n%s", r.id, len(seen), r.tasks, r.stderr)
	}
	t.Logf("run %s: %d tasks succeeded, %d failed for the infrastructure, %d left to resume", r.id, ok, infra, r.tasks-len(seen))
	return ok, infra
}

// assertGone fails unless nothing of run id is left in ns — no template,
// pool or claim, no Sandbox and no Pod — within goneWithin of the run's
// end. Teardown waits until the API server shows the run gone and deletes
// run Pods whose Sandbox is gone; the wait covers a Pod that appears only
// after that (once, after a kube-apiserver restart, a run ended with one
// left, before teardown checked). It is logged whenever it was needed, so
// the case stays visible.
func assertGone(t *testing.T, ns, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := clients(t, ns)
	deadline := time.Now().Add(goneWithin)
	for {
		inv, err := inventory.List(ctx, c.Client, ns, id)
		if err != nil {
			t.Fatal(err)
		}
		sandboxes := sandboxesOf(ctx, t, c, id)
		runs := inv.Runs().Items
		if len(runs) == 0 && len(sandboxes) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if len(runs) > 0 {
				t.Errorf("run %s left %+v", id, runs[0].Status)
			}
			if len(sandboxes) > 0 {
				t.Errorf("run %s left Sandboxes %v", id, sandboxes)
			}
			return
		}
		if len(runs) > 0 {
			t.Logf("run %s ended with %+v still there; waiting", id, runs[0].Status)
		}
		time.Sleep(time.Second)
	}
}

// sandboxesOf names the Sandboxes of run id. They carry no run label: the
// controller names them after the run's warm pool or claim, both named
// after the pool (resources.PoolName).
func sandboxesOf(ctx context.Context, t *testing.T, c *kube.Clients, id string) []string {
	t.Helper()
	list := &sandboxv1beta1.SandboxList{}
	if err := c.Client.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sb := range list.Items {
		for _, img := range images {
			if strings.HasPrefix(sb.Name, resources.PoolName(id, img)+"-") {
				out = append(out, sb.Name)
			}
		}
	}
	return out
}

// goneWithin is how long after its end a run's last objects may take to go.
const goneWithin = 30 * time.Second

func clients(t *testing.T, ns string) *kube.Clients {
	t.Helper()
	c, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// bystander is a run that holds its sandboxes in the namespace while a
// faulted run goes on beside it; once released it must finish every task
// and leave nothing — no other run's teardown or reap took any of it.
type bystander struct {
	*run
	hold string
}

func startBystander(t *testing.T, ns string) bystander {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hold"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b := bystander{startRun(t, ns, "bystander", 4, holdWork(dir)), filepath.Join(dir, "hold")}
	b.waitFor(t, "its sandboxes claimed", func() bool { return claimsOf(t, ns, "bystander") == 4 })
	return b
}

func (b bystander) release(t *testing.T, strict bool) {
	t.Helper()
	if err := os.Remove(b.hold); err != nil {
		t.Fatal(err)
	}
	if code := b.end(t); strict && code != 0 {
		t.Errorf("the bystander run exited %d:\n%s", code, b.stderr)
	}
	ok, _ := b.checkResults(t, true)
	if strict && ok != b.tasks {
		t.Errorf("the bystander run did %d of %d tasks: the faulted run beside it touched it:\n%s", ok, b.tasks, b.stderr)
	}
	assertGone(t, b.ns, b.id)
}

// claimsOf counts run id's claims that hold a Ready sandbox.
func claimsOf(t *testing.T, ns, id string) int {
	t.Helper()
	claims := &extensionsv1beta1.SandboxClaimList{}
	if err := clients(t, ns).Client.List(context.Background(), claims, client.InNamespace(ns), client.MatchingLabels{labels.RunID: id}); err != nil {
		return 0
	}
	n := 0
	for _, c := range claims.Items {
		for _, cond := range c.Status.Conditions {
			if cond.Type == string(sandboxv1beta1.SandboxConditionReady) && cond.Status == "True" {
				n++
			}
		}
	}
	return n
}

// podsOf lists run id's sandbox Pods.
func podsOf(t *testing.T, ns, id string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := clients(t, ns).Client.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{labels.RunID: id}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// inject records a fault as injected, for the count and the log.
func inject(t *testing.T, what string) {
	t.Helper()
	injected.Add(1)
	t.Logf("fault %d: %s", injected.Load(), what)
}

// seeded is the suite's randomness, its seed logged so a failure can be
// replayed with FAULTS_SEED.
func seeded(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FAULTS_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("FAULTS_SEED %q: %v", s, err)
		}
	}
	t.Logf("FAULTS_SEED=%d", seed)
	return rand.New(rand.NewPCG(seed, seed))
}
