package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// nodeFaultBound is how long a run under the real node's faults may take:
// its tasks take about 20 s, the kubelet is stopped for 30 s, and a claim
// waits at most the 2-minute ready timeout.
const nodeFaultBound = 4 * time.Minute

// The real node's faults, in the fault suite's terms (see faults/): the
// kubelet stopped for 30 s while tasks exec, and a sandbox's container
// killed while a task execs in it. The run ends within the bound, every
// task succeeded or failed for the infrastructure — the killed
// container's task as a lost sandbox, not as its command's exit — and
// nothing of the run is left.
func TestNodeFaults(t *testing.T) {
	requireLocal(t, "makes this machine's containerd and kubelet fail")
	for _, tt := range []struct {
		name   string
		work   string
		inject func(t *testing.T, c *kube.Clients, runID string) int
	}{
		{"kubelet stopped 30s", "sleep 5; echo done", func(t *testing.T, _ *kube.Clients, _ string) int {
			kubelet := local.Component("kubelet")
			if err := kubelet.Freeze(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(30 * time.Second)
			if err := kubelet.Thaw(); err != nil {
				t.Fatal(err)
			}
			return 0
		}},
		{"containers killed mid-exec", "sleep 30; echo done", func(t *testing.T, c *kube.Clients, runID string) int {
			return killClaimedContainers(t, c, runID, 2)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t)
			c, err := kube.ForConfig(restConfig(), ns)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			rows := ""
			for _, id := range []string{"a", "b", "c", "d"} {
				rows += `{"id": "` + id + `", "image": "` + testimages.Problem(1) + `"}` + "\n"
			}
			if err := os.WriteFile(filepath.Join(dir, "tasks.jsonl"), []byte(rows), 0o644); err != nil {
				t.Fatal(err)
			}
			resultsFile := filepath.Join(dir, "results.jsonl")
			const runID = "node-faults"
			done := make(chan int, 1)
			var stderr string
			go func() {
				var code int
				code, _, stderr = plugin("run", "-n", ns, "--run-id", runID, "--tasks", filepath.Join(dir, "tasks.jsonl"),
					"--max-concurrent", "2", "--claim-grace", "10s", "--ready-timeout", "2m", "--results", resultsFile, "-q",
					"--process", "exec", "--", "sh", "-c", tt.work)
				done <- code
			}()
			waitForClaims(t, c, runID, 2)
			time.Sleep(2 * time.Second) // the commands are running
			hit := tt.inject(t, c, runID)
			var code int
			select {
			case code = <-done:
			case <-time.After(nodeFaultBound):
				t.Fatalf("the run did not end within %s", nodeFaultBound)
			}
			if code != cli.ExitOK && code != cli.ExitFailure {
				t.Errorf("exit %d:\n%s", code, stderr)
			}
			rs := mustRead(t, resultsFile)
			lost := 0
			for _, r := range rs {
				switch {
				case r.OK:
				case r.Verdict == verdict.Infra:
					if r.Reason == verdict.Lost {
						lost++
					}
				default:
					t.Errorf("task %s failed, not for the infrastructure: %+v", r.ID, r)
				}
			}
			if len(rs) != 4 {
				t.Errorf("%d results, want one for each of 4 tasks:\n%s", len(rs), stderr)
			}
			if lost < hit {
				t.Errorf("%d containers were killed under their tasks, but %d tasks say their sandbox was lost: %+v", hit, lost, rs)
			}
			inv, err := inventory.List(context.Background(), c.Client, ns, runID)
			if err != nil {
				t.Fatal(err)
			}
			if left := inv.Runs().Items; len(left) > 0 {
				t.Errorf("the run left %+v", left[0].Status)
			}
		})
	}
}

// waitForClaims waits until n claims of runID are Ready.
func waitForClaims(t *testing.T, c *kube.Clients, runID string, n int) {
	t.Helper()
	deadline := time.Now().Add(nodeFaultBound)
	for time.Now().Before(deadline) {
		if len(readyClaims(t, c, runID)) >= n {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %d claims of %s Ready within %s", n, runID, nodeFaultBound)
}

// readyClaims returns the Pods of runID's Ready claims.
func readyClaims(t *testing.T, c *kube.Clients, runID string) []string {
	t.Helper()
	claims := &extensionsv1beta1.SandboxClaimList{}
	if err := c.Client.List(context.Background(), claims, client.InNamespace(c.Namespace), client.MatchingLabels{labels.RunID: runID}); err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, cl := range claims.Items {
		for _, cond := range cl.Status.Conditions {
			if cond.Type == string(sandboxv1beta1.SandboxConditionReady) && cond.Status == "True" && cl.Status.SandboxStatus.Name != "" {
				pods = append(pods, cl.Status.SandboxStatus.Name)
			}
		}
	}
	return pods
}

// killClaimedContainers kills the containers of up to n claimed sandboxes
// of runID through the node's CRI, as the OOM killer or a crash would, and
// returns how many it killed.
func killClaimedContainers(t *testing.T, c *kube.Clients, runID string, n int) int {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+local.CRISocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cri := criapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	killed := 0
	for _, pod := range readyClaims(t, c, runID) {
		if killed == n {
			break
		}
		resp, err := cri.ListContainers(ctx, &criapi.ListContainersRequest{Filter: &criapi.ContainerFilter{
			State:         &criapi.ContainerStateValue{State: criapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{"io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": c.Namespace}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, ctr := range resp.Containers {
			if _, err := cri.StopContainer(ctx, &criapi.StopContainerRequest{ContainerId: ctr.Id, Timeout: 0}); err != nil {
				t.Fatal(err)
			}
			t.Logf("fault: killed container %s of pod %s", ctr.Metadata.GetName(), pod)
			killed++
		}
	}
	return killed
}
