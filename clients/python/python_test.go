// Package python_test runs the Python client's tests against `serve` on
// the local test cluster's kwok nodes, and FakeFleet's with no cluster. The
// tests that need a real node (exec, files) run in e2e.
package python_test

import (
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testpython"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

func TestPythonClient(t *testing.T) {
	testpython.Run(t, cluster.Kubeconfig(), cluster.NewNamespace(t), []string{"tests"})
}
