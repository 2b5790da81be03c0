package report_test

import (
	"fmt"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
)

// Percentiles are nearest rank over sorted durations.
func ExamplePercentile() {
	sorted := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 4 * time.Second}
	fmt.Println(report.Percentile(sorted, 0.5), report.Percentile(sorted, 0.99))
	// Output: 200ms 4s
}
