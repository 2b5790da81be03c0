package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/results"
)

// kubeconfig is the path of the cluster under test's kubeconfig.
func kubeconfig() string {
	if local != nil {
		return local.Kubeconfig()
	}
	return os.Getenv(KubeconfigEnv)
}

// plugin runs `kubectl sandbox-fleet args...` in this process.
func plugin(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code = cli.Execute(streams, append([]string{"--kubeconfig", kubeconfig()}, args...))
	return code, out.String(), errOut.String()
}

// evalScript is what an eval sweep runs in each SWE-bench-like sandbox:
// optionally apply the fix, then run the problem's tests.
const evalScript = `#!/bin/sh
cd /testbed || exit 3
if [ "$1" = fix ]; then sed -i 's/a - b/a + b/' calc.py; fi
python3 -m unittest -q 2>&1
rc=$?
echo "task $SANDBOX_FLEET_TASK_ID tested" >&2
exit $rc
`

// An eval sweep on the real node: a script copied into each sandbox runs
// the problem's tests; every task's exit code and output are collected,
// a task whose image cannot be pulled fails fast while the rest complete,
// and a rerun with the same results file runs only that task again.
func TestRunEvalSweep(t *testing.T) {
	ns := newNamespace(t)
	dir := t.TempDir()
	rows := []string{
		`{"id": "p1-fixed", "image": "` + testimages.Problem(1) + `", "mode": "fix"}`,
		`{"id": "p1-broken", "image": "` + testimages.Problem(1) + `", "mode": "none"}`,
		`{"id": "p2-fixed", "image": "` + testimages.Problem(2) + `", "mode": "fix"}`,
		`{"id": "p2-broken", "image": "` + testimages.Problem(2) + `", "mode": "none"}`,
		`{"id": "no-such-image", "image": "docker.io/library/busybox:no-such-tag", "mode": "fix"}`,
	}
	for name, content := range map[string]string{
		"tasks.jsonl": strings.Join(rows, "\n") + "\n",
		"eval.sh":     evalScript,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resultsFile := filepath.Join(dir, "results.jsonl")
	const readyTimeout = 5 * time.Minute
	args := []string{"run", "-n", ns, "--tasks", filepath.Join(dir, "tasks.jsonl"), "--script", filepath.Join(dir, "eval.sh"),
		"--max-concurrent", "4", "--claim-grace", "10s", "--ready-timeout", readyTimeout.String(),
		"--results", resultsFile, "-o", "json", "--", "{metadata.mode}"}

	code, out, stderr := plugin(args...)
	if code != cli.ExitFailure || !strings.Contains(stderr, "1 of 5 tasks could not run") {
		t.Errorf("run: exit %d, want %d for the task that could not run\n%s", code, cli.ExitFailure, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.WallSeconds > readyTimeout.Seconds()/3 {
		t.Errorf("the run took %.0fs: the bad image did not fail fast (ready timeout %s)", rep.WallSeconds, readyTimeout)
	}
	byID := map[string][]fleet.Result{}
	for _, r := range mustRead(t, resultsFile) {
		byID[r.ID] = append(byID[r.ID], r)
	}
	for id, want := range map[string]struct {
		code    int
		stdout  string
		verdict string
	}{
		"p1-fixed": {0, "OK", ""}, "p2-fixed": {0, "OK", ""},
		"p1-broken": {1, "FAILED (failures=1)", "task"}, "p2-broken": {1, "FAILED (failures=1)", "task"},
	} {
		rs := byID[id]
		if len(rs) != 1 {
			t.Errorf("task %s has %d results, want 1", id, len(rs))
			continue
		}
		r := rs[0]
		if r.ExitCode == nil || *r.ExitCode != want.code || !strings.Contains(r.Stdout, want.stdout) ||
			!strings.Contains(r.Stderr, "task "+id+" tested") || r.Node == "" || r.OK != (want.code == 0) || r.Verdict != want.verdict {
			t.Errorf("task %s: %+v; want exit code %d, %q in stdout and verdict %q", id, r, want.code, want.stdout, want.verdict)
		}
	}
	bad := byID["no-such-image"]
	if len(bad) != 1 || bad[0].ExitCode != nil || bad[0].OK || !strings.Contains(bad[0].Error, "no-such-tag") ||
		bad[0].Verdict != "infra" || bad[0].Reason != "start" {
		t.Errorf("the bad image's task: %+v; want an error naming the image, no exit code, and the verdict infra (start)", bad)
	}

	// The rerun does only the task that could not run.
	code, _, stderr = plugin(args...)
	if code != cli.ExitFailure {
		t.Errorf("rerun: exit %d\n%s", code, stderr)
	}
	counts := map[string]int{}
	for _, r := range mustRead(t, resultsFile) {
		counts[r.ID]++
	}
	for _, id := range []string{"p1-fixed", "p1-broken", "p2-fixed", "p2-broken"} {
		if counts[id] != 1 {
			t.Errorf("task %s ran %d times over the two runs, want once", id, counts[id])
		}
	}
	if counts["no-such-image"] != 2 {
		t.Errorf("the task that could not run was tried %d times, want 2 (once a run)", counts["no-such-image"])
	}
}

func mustRead(t *testing.T, path string) []fleet.Result {
	t.Helper()
	rs, err := results.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// The sample batch `make demo` runs, from examples/demo, stays runnable:
// every task's work runs, the attempts that apply the fix pass their
// tests, the rest fail them, and the smoke tasks pass.
func TestExampleBatch(t *testing.T) {
	ns := newNamespace(t)
	demo := filepath.Join("..", "examples", "demo")
	resultsFile := filepath.Join(t.TempDir(), "results.jsonl")
	code, out, stderr := plugin("run", "-n", ns, "-f", filepath.Join(demo, "fleet.yaml"), "--tasks", filepath.Join(demo, "tasks.jsonl"),
		"--script", filepath.Join(demo, "eval.sh"), "--results", resultsFile, "-q", "--", "{metadata.mode}")
	if code != cli.ExitOK {
		t.Fatalf("the demo batch: exit %d\n%s%s", code, out, stderr)
	}
	rows, err := os.ReadFile(filepath.Join(demo, "tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	mode := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(rows)), "\n") {
		var row struct {
			InstanceID string `json:"instance_id"`
			Mode       string `json:"mode"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		mode[row.InstanceID] = row.Mode
	}
	rs, err := results.Read(resultsFile)
	if err != nil || len(rs) != len(mode) {
		t.Fatalf("%d results (%v), want one per task of %d", len(rs), err, len(mode))
	}
	for _, r := range rs {
		want := 0
		if mode[r.ID] == "none" {
			want = 1
		}
		if r.ExitCode == nil || *r.ExitCode != want {
			t.Errorf("task %s (mode %s): exit code %v, want %d; error %q, output %q", r.ID, mode[r.ID], r.ExitCode, want, r.Error, r.Stdout)
		}
	}
}

// A task past its --timeout is stopped in its sandbox, with what it put in
// the background, and scored as the task's failure (timed out, exit code
// 124, its output so far), not the infrastructure's.
func TestRunTimeoutIsTheTasks(t *testing.T) {
	ns := newNamespace(t)
	dir := t.TempDir()
	tasksFile := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(tasksFile, []byte(`{"id": "hangs", "image": "`+testimages.Problem(1)+`"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	resultsFile := filepath.Join(dir, "results.jsonl")
	code, _, stderr := plugin("run", "-n", ns, "--tasks", tasksFile, "--timeout", "3s", "--claim-grace", "10s",
		"--results", resultsFile, "-q", "--", "sh", "-c", "echo started; sleep 600 & sleep 600")
	// A timed-out task's work ran: the run exits 0 as for any exit code.
	if code != 0 {
		t.Errorf("run: exit %d, want 0: the task's work ran\n%s", code, stderr)
	}
	rs := mustRead(t, resultsFile)
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1", len(rs))
	}
	r := rs[0]
	if !r.TimedOut || r.ExitCode == nil || *r.ExitCode != 124 || r.Verdict != "task" || r.OK || !strings.Contains(r.Stdout, "started") {
		t.Errorf("result %+v; want timed out, exit code 124, verdict task and the output so far", r)
	}
	if p := r.Phases["process"]; p > 15 {
		t.Errorf("the process phase took %.0fs for a 3s timeout", p)
	}
}
