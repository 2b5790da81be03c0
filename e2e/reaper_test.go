package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleetclient"
)

// The cluster-side reaper as an admin applies it (manifests/reaper, only
// its image redirected to the local registry): a session whose serve was
// SIGKILLed — a trainer and its serve gone at once — is removed by the
// CronJob's next run once its heartbeat expired, with nobody running
// reap; a session whose serve is alive keeps everything.
func TestReaperAsShipped(t *testing.T) {
	if local == nil {
		t.Skip("pushes the plugin's image to the local cluster's registry")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := kubectlOf(t, ctx)
	repository, tag := pushPluginImage(t, ctx, root)
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, filepath.Join(root, "manifests", "reaper"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("resources: [%s]\nimages:\n- {name: ghcr.io/sandbox-fleet/sandbox-fleet, newName: %s, newTag: %q}\n",
		rel, repository, tag)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}

	// Two sessions with a warm pool each: one whose serve dies, one whose
	// serve lives on.
	plugin, err := testcluster.BuildCommand(t.TempDir(), "kubectl-sandbox_fleet")
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	dead, deadRun := startSession(t, ctx, plugin, ns)
	_, liveRun := startSession(t, ctx, plugin, ns)
	// The dead session's trainer had the nodes pre-pull for it, as
	// sandbox_fleet.rl's prepull() does: the job is the run's too.
	images := filepath.Join(t.TempDir(), "images.txt")
	if err := os.WriteFile(images, []byte(testimages.Busybox+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(plugin, "--kubeconfig", kubeconfig(), "prepull", "-n", ns, "--tasks", images, "--run-id", deadRun).CombinedOutput(); err != nil {
		t.Fatalf("prepull --run-id %s: %v\n%s", deadRun, err, out)
	}
	for _, run := range []string{deadRun, liveRun} {
		if len(runObjects(t, kubectl, ns, run)) == 0 {
			t.Fatalf("session %s made nothing to reap", run)
		}
	}
	if err := dead.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = dead.Wait()

	kubectl("apply", "-k", overlay)
	t.Cleanup(func() {
		// No Job starts while the reaper goes, and those there go first,
		// their Pods with them: a Pod caught starting as the cluster stops
		// would leave its container half made.
		for _, args := range [][]string{
			{"patch", "cronjob", "sandbox-fleet-reaper", "-n", "sandbox-fleet-reaper", "-p", `{"spec":{"suspend":true}}`},
			{"delete", "jobs", "--all", "-n", "sandbox-fleet-reaper", "--cascade=foreground", "--wait"},
			{"delete", "-k", overlay, "--wait"},
		} {
			out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kubeconfig()}, args...)...).CombinedOutput()
			if err != nil {
				t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
	// The heartbeat (5s) expires at once; the CronJob runs every two
	// minutes: within three, nothing of the dead session is left.
	err = wait.PollUntilContextTimeout(ctx, 5*time.Second, 5*time.Minute, false, func(context.Context) (bool, error) {
		return len(runObjects(t, kubectl, ns, deadRun)) == 0, nil
	})
	if err != nil {
		t.Fatalf("the reaper left session %s's %v (jobs: %s)", deadRun, runObjects(t, kubectl, ns, deadRun),
			kubectl("get", "jobs,pods", "-n", "sandbox-fleet-reaper", "-o", "wide"))
	}
	if len(runObjects(t, kubectl, ns, liveRun)) == 0 {
		t.Errorf("the reaper took session %s, whose serve is alive", liveRun)
	}
	// What the reaper may do: delete a run's objects anywhere; and not make
	// or change any, exec into a Pod, or read a Secret.
	kc := kubeClient(t)
	for _, tt := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: "coordination.k8s.io", Resource: "leases"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: "sandbox-fleet.io", Resource: "prepulljobs"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "sandbox-fleet.io", Resource: "prepulljobs"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Resource: "pods"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "exec"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Resource: "namespaces"}, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:sandbox-fleet-reaper:sandbox-fleet-reaper",
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:sandbox-fleet-reaper"},
			ResourceAttributes: &tt.attrs,
		}}
		got, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tt.want {
			t.Errorf("the reaper may %s %s/%s in %s: %v, want %v", tt.attrs.Verb, tt.attrs.Resource, tt.attrs.Subresource, tt.attrs.Namespace, got.Status.Allowed, tt.want)
		}
	}
	logs := kubectl("logs", "-n", "sandbox-fleet-reaper", "-l", "app.kubernetes.io/name=sandbox-fleet-reaper", "--tail=50")
	if !strings.Contains(logs, deadRun) || strings.Contains(logs, liveRun) {
		t.Errorf("the reaper's log names %s and not %s? it says:\n%s", deadRun, liveRun, logs)
	}
}

// startSession starts serve in ns with a short heartbeat and a warm pool
// of one task, and returns its process (killed at the test's end) and
// its run id.
func startSession(t *testing.T, ctx context.Context, plugin, ns string) (*exec.Cmd, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "serve.sock")
	runID := "reaper-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd := exec.Command(plugin, "--kubeconfig", kubeconfig(), "serve", "-n", ns, "--listen", "unix://"+sock, "--run-id", runID,
		"--heartbeat", "5s")
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
	if !bufio.NewScanner(stdout).Scan() {
		t.Fatalf("serve %s printed no address", runID)
	}
	c, err := fleetclient.New("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddTasks(ctx, connect.NewRequest(&fleetv1.AddTasksRequest{Tasks: []*fleetv1.Task{{Id: "t", Image: testimages.Busybox}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookahead(ctx, connect.NewRequest(&fleetv1.LookaheadRequest{TaskIds: []string{"t"}})); err != nil {
		t.Fatal(err)
	}
	return cmd, runID
}

// runObjects lists what of run is in ns: its sandbox objects, Pods,
// heartbeat, session state and pre-pulls.
func runObjects(t *testing.T, kubectl func(...string) string, ns, run string) []string {
	t.Helper()
	out := kubectl("get", "sandboxclaims,sandboxwarmpools,sandboxtemplates,sandboxes,pods,leases,configmaps,prepulljobs", "-n", ns,
		"-l", "sandbox-fleet.io/run-id="+run, "-o", "name")
	return strings.Fields(out)
}
