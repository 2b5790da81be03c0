package e2e

import (
	"encoding/json"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/loadtest"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
)

// loadtest compares fresh sandboxes with recycled ones on a problem
// image: pipelined claims a sandbox per task, pipelined+recycle one for
// the image, reset after each task for the next, and counts those warm.
func TestLoadtestComparesRecycling(t *testing.T) {
	ns := newNamespace(t)
	code, out, stderr := plugin("loadtest", "-n", ns, "--image", testimages.Problem(1), "--tasks-per-image", "3",
		"--task-time", "100ms", "--strategies", "pipelined,pipelined+recycle", "--concurrency", "1", "--run-id", "lt-recycle", "-o", "json")
	if code != cli.ExitOK {
		t.Fatalf("loadtest: exit %d\n%s", code, stderr)
	}
	var rows []loadtest.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("loadtest -o json: %v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0].RunID != "lt-recycle-1-pipelined-c1" || rows[1].RunID != "lt-recycle-2-pipelined-recycle-c1" {
		t.Fatalf("rows %+v, want a fresh and a recycled run", rows)
	}
	fresh, recycled := rows[0], rows[1]
	for _, r := range rows {
		if r.OK != 3 || r.Error != "" || r.Report == nil {
			t.Fatalf("%s: %d/3 ok, error %q\n%s", r.RunID, r.OK, r.Error, stderr)
		}
	}
	if fresh.Recycle || fresh.Report.Claims != 3 || fresh.Report.TasksReused != 0 {
		t.Errorf("fresh run: recycle %v, %d claims, %d reused; want 3 claims, none reused", fresh.Recycle, fresh.Report.Claims, fresh.Report.TasksReused)
	}
	if !recycled.Recycle || recycled.Report.Claims != 1 || recycled.Report.TasksReused != 2 || recycled.WarmShare < 2.0/3 {
		t.Errorf("recycled run: recycle %v, %d claims, %d reused, warm %.2f; want 1 claim, 2 reused, warm at least 2/3",
			recycled.Recycle, recycled.Report.Claims, recycled.Report.TasksReused, recycled.WarmShare)
	}
	t.Logf("fresh %+v\nrecycled %+v", fresh, recycled)
}
