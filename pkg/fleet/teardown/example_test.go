package teardown_test

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/teardown"
)

// reap --orphans takes the runs whose driver's heartbeat expired, and the
// old runs of drivers without one; never a run whose driver still beats.
func ExampleOrphans() {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	run := func(id string, age time.Duration) inventory.Run {
		return inventory.Run{ObjectMeta: metav1.ObjectMeta{Name: id, CreationTimestamp: metav1.NewTime(now.Add(-age))}}
	}
	runs := []inventory.Run{run("driver-died", time.Minute), run("still-beating", 24*time.Hour), run("no-heartbeat-old", time.Hour), run("no-heartbeat-young", time.Minute)}
	expired := map[string]bool{"driver-died": true, "still-beating": false}
	for _, r := range teardown.Orphans(runs, nil, expired, 10*time.Minute, now) {
		fmt.Println(r.Name)
	}
	// Output:
	// driver-died
	// no-heartbeat-old
}
