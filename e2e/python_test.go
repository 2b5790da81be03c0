package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/gobuild"
	"github.com/sandbox-fleet/sandbox-fleet/internal/pywheel"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testpython"
)

// The Python client through `serve` on the real node: exec streaming,
// stdin, exit codes, files in and out, a sandbox that cannot start and one
// lost mid-exec, the framework runtimes' episodes
// (clients/python/tests/test_real_node.py), and the managed runner
// (test_real_node_run.py), and agent-sandbox-rl's API on a serve the client
// started (test_real_node_rl.py).
func TestPythonClientOnTheRealNode(t *testing.T) {
	var node string
	if local != nil {
		node = local.RealNodeName()
	} else {
		node = publishedNode(t)
	}
	testpython.Run(t, kubeconfig(), newNamespace(t), []string{"tests/test_real_node.py", "tests/test_real_node_run.py", "tests/test_resume.py", "tests/test_real_node_rl.py"},
		"SANDBOX_FLEET_REAL_NODE=1", "SANDBOX_FLEET_REAL_NODE_NAME="+node, "SANDBOX_FLEET_BUSYBOX="+testimages.Busybox, "SANDBOX_FLEET_PROBLEM="+testimages.Problem(1), "SANDBOX_FLEET_PROBLEM2="+testimages.Problem(2))
}

// sandbox_fleet.rl's prepull, as the reference's README calls it
// (setup(prepull=True)), with the node's agent running: the node pulls an
// image it never held through the session's PrepullJob, which goes with
// prepull_delete() or the teardown.
func TestPythonPrepullOnTheRealNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n, ns, _, img := pullingNode(t, ctx, "python-prepull")
	testpython.Run(t, kubeconfig(), ns, []string{"tests/test_real_node_rl.py::test_prepull_as_the_reference_does"},
		"SANDBOX_FLEET_REAL_NODE=1", "SANDBOX_FLEET_REAL_NODE_NAME="+n.name, "SANDBOX_FLEET_FRESH_IMAGE="+img)
}

// pip install of the platform wheel is all a trainer needs: in a venv with
// only the linux/amd64 wheel hack/dist builds (the plugin inside), and a
// PATH with no Go and no plugin, the reference's managed-runner example
// runs on the real node on the serve the client starts from the binary
// the wheel carries.
func TestPythonPlatformWheelOnTheRealNode(t *testing.T) {
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pure, err := pywheel.BuildPure(filepath.Join(root, "clients", "python"), filepath.Join(dir, "build"))
	if err != nil {
		t.Fatal(err)
	}
	binary := filepath.Join(dir, "linux_amd64", "kubectl-sandbox_fleet")
	if err := gobuild.Command(root, "kubectl-sandbox_fleet", binary, gobuild.Target{GOOS: "linux", GOARCH: "amd64"}); err != nil {
		t.Fatal(err)
	}
	wheel, err := pywheel.Platform(pure, binary, "linux", "amd64", dir)
	if err != nil {
		t.Fatal(err)
	}
	testpython.RunWheel(t, wheel, kubeconfig(), newNamespace(t), []string{"tests/test_real_node_rl.py::test_quickstart_as_written"},
		"SANDBOX_FLEET_REAL_NODE=1", "SANDBOX_FLEET_BUNDLED_PLUGIN=1", "PATH=/usr/bin:/bin",
		"SANDBOX_FLEET_PROBLEM="+testimages.Problem(1), "SANDBOX_FLEET_PROBLEM2="+testimages.Problem(2))
}
