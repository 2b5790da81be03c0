package cli_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/otlptree"
)

// With an OTLP endpoint in the environment a run sends its span tree to
// it: the run; its windows, each warming images and running tasks; each
// task's claim, process and release, with the task's id, image, cluster,
// node and verdict; the teardown.
func TestRunTraced(t *testing.T) {
	receiver, err := otlptree.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer receiver.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.Endpoint())
	t.Setenv("OTEL_SERVICE_NAME", "")
	ns := cluster.NewNamespace(t)
	dir := write(t, map[string]string{"tasks.txt": "example.com/a:1\nexample.com/a:1\nexample.com/b:1\nexample.com/b:1\n"})
	code, _, stderr := execute("run", "-n", ns, "--tasks", filepath.Join(dir, "tasks.txt"), "--process", "none",
		"--strategy", "pipelined", "--window-size", "1", "--max-concurrent", "2", "--run-id", "traced", "-q")
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	spans := receiver.Spans()
	var tree bytes.Buffer
	if err := otlptree.Write(&tree, spans, []string{"sandbox_fleet.run_id", "sandbox_fleet.window", "sandbox_fleet.task.id", "sandbox_fleet.verdict"}, 10); err != nil {
		t.Fatal(err)
	}
	t.Logf("spans:\n%s", tree.String())

	children := otlptree.Children(spans)
	roots := children[""]
	if len(roots) != 1 || roots[0].Name != "run" || roots[0].Attributes["sandbox_fleet.run_id"] != "traced" || roots[0].Service != "kubectl-sandbox-fleet" {
		t.Fatalf("roots %+v, want one run span of traced from kubectl-sandbox-fleet", roots)
	}
	names := func(parent string) string {
		var n []string
		for _, s := range children[parent] {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}
	if got := names(roots[0].ID); got != "window,window,teardown" {
		t.Errorf("the run's children: %s, want two windows and the teardown", got)
	}
	tasks := 0
	for _, w := range children[roots[0].ID] {
		if w.Name != "window" {
			continue
		}
		for _, s := range children[w.ID] {
			if s.Name != "task" {
				continue
			}
			tasks++
			a := s.Attributes
			if a["sandbox_fleet.task.id"] == "" || !strings.HasPrefix(a["sandbox_fleet.task.image"], "example.com/") || a["sandbox_fleet.cluster"] == "" ||
				a["sandbox_fleet.node"] == "" || a["sandbox_fleet.verdict"] != "ok" {
				t.Errorf("task span attributes %v", a)
			}
			if got := names(s.ID); got != "claim,process,release" {
				t.Errorf("task %s's children: %s, want claim, process, release", a["sandbox_fleet.task.id"], got)
			}
		}
	}
	if tasks != 4 {
		t.Errorf("%d task spans under the windows, want 4", tasks)
	}
	if !strings.Contains(names(children[roots[0].ID][0].ID), "warm") {
		t.Errorf("the first window does not warm: %s", names(children[roots[0].ID][0].ID))
	}
}
