package e2e

import (
	"testing"

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
	testpython.Run(t, kubeconfig(), newNamespace(t), []string{"tests/test_real_node.py", "tests/test_real_node_run.py", "tests/test_resume.py", "tests/test_real_node_rl.py"},
		"SANDBOX_FLEET_REAL_NODE=1", "SANDBOX_FLEET_BUSYBOX="+testimages.Busybox, "SANDBOX_FLEET_PROBLEM="+testimages.Problem(1), "SANDBOX_FLEET_PROBLEM2="+testimages.Problem(2))
}
