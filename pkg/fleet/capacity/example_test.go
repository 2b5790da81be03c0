package capacity_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/capacity"
)

// How many sandboxes a cluster's nodes hold at once, and what bounds it:
// four nodes of 16 CPUs and 64 GiB, sandboxes requesting 2 CPUs and
// 12 GiB, are held down by memory.
func ExampleNewLimits() {
	totals := capacity.Totals{Nodes: 4, CPUMilli: 4 * 16000, MemoryBytes: 4 * 64 << 30, Pods: 4 * 110}
	limits := capacity.NewLimits(totals, capacity.Sandbox{CPUMilli: 2000, MemoryBytes: 12 << 30})
	n, by := limits.Fit()
	fmt.Println(n, "sandboxes at once, bounded by", by)
	// Output: 21 sandboxes at once, bounded by memory
}
