// Package python_test runs the Python client's tests against `serve` on
// the local test cluster's kwok nodes, and FakeFleet's with no cluster. The
// tests that need a real node (exec, files) run in e2e.
package python_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/otlptree"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testpython"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// The package type-checks under Debian's mypy --strict: its py.typed
// tells trainers' type checkers to trust its annotations.
func TestPythonClientTypes(t *testing.T) {
	if _, err := exec.LookPath("mypy"); err != nil {
		t.Fatalf("mypy is missing (make node-deps installs it): %v", err)
	}
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("mypy", "--strict", "--cache-dir", t.TempDir(), "sandbox_fleet")
	cmd.Dir = filepath.Join(root, "clients", "python")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mypy --strict sandbox_fleet: %v\n%s", err, out)
	}
}

func TestPythonClient(t *testing.T) {
	testpython.Run(t, cluster.Kubeconfig(), cluster.NewNamespace(t), []string{"tests"})
}

// A trainer's trace context, sent by the client within trace_context,
// makes serve's spans of those calls children of the trainer's span: the
// Acquire and the Release of tests/test_traced.py, with the task, node
// and outcome; the AddTasks called outside it is in a trace of its own.
func TestPythonClientTraced(t *testing.T) {
	receiver, err := otlptree.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer receiver.Stop()
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	testpython.Run(t, cluster.Kubeconfig(), cluster.NewNamespace(t), []string{"tests/test_traced.py"},
		"OTEL_EXPORTER_OTLP_ENDPOINT="+receiver.Endpoint(), "OTEL_SERVICE_NAME=serve-traced",
		"SANDBOX_FLEET_TRACEPARENT=00-"+traceID+"-"+parent+"-01")
	byName := map[string]otlptree.Span{}
	for _, s := range receiver.Spans() {
		if s.Service == "serve-traced" {
			byName[s.Name] = s
		}
	}
	const service = "sandboxfleet.fleet.v1.FleetService/"
	for _, name := range []string{"Acquire", "Release"} {
		s, ok := byName[service+name]
		if !ok {
			t.Fatalf("no %s span; spans: %v", name, receiver.Spans())
		}
		if s.TraceID != traceID || s.Parent != parent {
			t.Errorf("%s: trace %s parent %s, want the client's %s %s", name, s.TraceID, s.Parent, traceID, parent)
		}
		if s.Attributes["rpc.method"] != name || s.Failed {
			t.Errorf("%s: attributes %v, failed %v", name, s.Attributes, s.Failed)
		}
	}
	if a := byName[service+"Acquire"].Attributes; a["sandbox_fleet.task.id"] != "traced-1" || a["sandbox_fleet.node"] == "" || a["sandbox_fleet.sandbox"] == "" {
		t.Errorf("Acquire's attributes %v, want the task, node and sandbox", a)
	}
	if a := byName[service+"Release"].Attributes; a["sandbox_fleet.outcome"] == "" {
		t.Errorf("Release's attributes %v, want the outcome", a)
	}
	if s, ok := byName[service+"AddTasks"]; !ok || s.TraceID == traceID || s.Parent != "" {
		t.Errorf("AddTasks span %+v (found %v), want a root of a trace of its own", s, ok)
	}
}
