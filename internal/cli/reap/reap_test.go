package reap

import (
	"bytes"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testobjects"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
)

func TestPrintRows(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	inv := &inventory.Inventory{}
	testobjects.MakeRun(inv, "rl", "run-killed", now.Add(-3*time.Hour)).
		Pool("run-killed-busybox", "docker.io/library/busybox:1.36", 2, "", "node-1", "node-2").
		Claim("run-killed-task-1", "task-1", "run-killed-busybox", 1)
	testobjects.MakeRun(inv, "rl", "run-lost", now.Add(-20*time.Minute)).
		Pool("run-lost-calc", "docker.io/swebench/calc-1:latest", 1, "", "")
	runs := inv.Runs().Items
	var out bytes.Buffer
	if err := printRows(&out, []row{{"gpu-west", runs[0], "reaped"}, {"gpu-west", runs[1], "would reap"}}, now); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "reap", out.String())
}
