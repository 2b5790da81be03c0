package get

import (
	"bytes"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testobjects"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// sample is two runs: run-a with a busybox pool Ready on two nodes, a
// calc pool with one Pod Ready and one in ImagePullBackOff, and three
// claims (two Ready, one waiting); run-b, younger, warming one pool.
func sample() *inventory.Inventory {
	inv := &inventory.Inventory{}
	testobjects.MakeRun(inv, "rl", "run-a", now.Add(-2*time.Hour)).
		Pool("run-a-busybox-0a1b2c", "docker.io/library/busybox:1.36", 3, "", "node-1", "node-1", "node-2").
		Pool("run-a-calc-3d4e5f", "docker.io/swebench/calc-1:latest", 2, "ImagePullBackOff", "node-2", "").
		Claim("run-a-task-1", "task-1", "run-a-busybox-0a1b2c", 1).
		Claim("run-a-task-2", "task-2", "run-a-calc-3d4e5f", 4).
		Claim("run-a-task-3", "task-3", "run-a-calc-3d4e5f", 5)
	testobjects.MakeRun(inv, "sweeps", "run-b", now.Add(-90*time.Second)).
		Pool("run-b-busybox-9f8e7d", "docker.io/library/busybox:1.36", 1, "", "")
	return inv
}

func TestPrinters(t *testing.T) {
	for _, tt := range []struct {
		golden string
		kind   string
		opts   PrintOptions
	}{
		{"runs", "runs", PrintOptions{Format: "table"}},
		{"runs-wide-all-namespaces", "runs", PrintOptions{Format: "wide", AllNamespaces: true}},
		{"runs-json", "runs", PrintOptions{Format: "json"}},
		{"runs-yaml", "runs", PrintOptions{Format: "yaml"}},
		{"runs-name", "runs", PrintOptions{Format: "name"}},
		{"pools", "pools", PrintOptions{Format: "table"}},
		{"pools-wide", "pools", PrintOptions{Format: "wide"}},
		{"pools-no-headers", "pools", PrintOptions{Format: "table", NoHeaders: true}},
		{"pools-name", "pools", PrintOptions{Format: "name"}},
		{"claims", "claims", PrintOptions{Format: "table"}},
		{"claims-wide", "claims", PrintOptions{Format: "wide"}},
		{"claims-yaml", "claims", PrintOptions{Format: "yaml"}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			var k kind
			for _, each := range kinds {
				if each.use == tt.kind {
					k = each
				}
			}
			list, table := k.list(sample(), now)
			if err := setKinds(list); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := Print(&out, list, table, tt.opts); err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, tt.golden, out.String())
		})
	}
}
