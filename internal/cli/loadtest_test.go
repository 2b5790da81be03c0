package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/loadtest"
)

// A load test of two strategies at two concurrencies does four whole runs
// of the batch, one after another, measures each and leaves nothing.
func TestLoadtest(t *testing.T) {
	ns := cluster.NewNamespace(t)
	code, out, stderr := execute("loadtest", "-n", ns, "--image", "example.com/bench:img{i:02d}", "--images", "2",
		"--tasks-per-image", "3", "--task-time", "200ms", "--process", "none",
		"--strategies", "naive,pipelined", "--concurrency", "2,4", "--run-id", "lt", "-o", "json")
	if code != cli.ExitOK {
		t.Fatalf("loadtest: exit %d\n%s", code, stderr)
	}
	var rows []loadtest.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("loadtest -o json: %v\n%s", err, out)
	}
	want := []string{"lt-1-naive-c2", "lt-2-naive-c4", "lt-3-pipelined-c2", "lt-4-pipelined-c4"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, r := range rows {
		if r.RunID != want[i] || r.OK != 6 || r.Tasks != 6 || r.Error != "" {
			t.Errorf("row %d: run %s, %d/%d ok, error %q; want %s, 6/6", i, r.RunID, r.OK, r.Tasks, r.Error, want[i])
		}
		if r.WallSeconds <= 0 || r.TimeToSandboxP50 <= 0 || r.TimeToSandboxP99 < r.TimeToSandboxP50 ||
			r.WarmShare < 0 || r.WarmShare > 1 || r.ClaimsPerSecond <= 0 || r.PeakSandboxes < 1 || r.RequestsPerTask < 1 {
			t.Errorf("row %s measures %+v", r.RunID, r)
		}
		if r.Report == nil || r.Report.Claims != 6 || r.Report.Strategy != r.Strategy {
			t.Errorf("row %s: report %+v, want 6 claims under %s", r.RunID, r.Report, r.Strategy)
		}
	}
	for _, line := range []string{"loadtest lt: 2 images of 3 tasks each, 200ms each; 4 runs", "pipelined at concurrency 4: run lt-4-pipelined-c4"} {
		if !strings.Contains(stderr, line) {
			t.Errorf("stderr lacks %q:\n%s", line, stderr)
		}
	}
	assertNothingIn(t, ns)
}

// Bad flags are usage errors, each saying what to do, and create nothing.
func TestLoadtestBadInput(t *testing.T) {
	ns := cluster.NewNamespace(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "no image: give --image"},
		{[]string{"--image", "busybox:1.36", "--images", "3"}, `image "busybox:1.36" has no {i}`},
		{[]string{"--image", "busybox", "--strategies", "naive,fastest"}, `unknown strategy "fastest"`},
		{[]string{"--image", "busybox", "--concurrency", "4,0"}, "--concurrency 0: must be at least 1"},
		{[]string{"--image", "busybox", "--process", "local"}, `--process "local": use exec or none`},
		{[]string{"--image", "busybox", "--run-id", "Bad_ID"}, "is not a DNS label"},
		{[]string{"--image", "busybox", "--strategy", "naive"}, "unknown flag: --strategy"},
	} {
		code, _, stderr := execute(append([]string{"loadtest", "-n", ns}, tt.args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("loadtest %v: exit %d, stderr %q; want exit 2 saying %q", tt.args, code, stderr, tt.want)
		}
	}
	assertNothingIn(t, ns)
}
