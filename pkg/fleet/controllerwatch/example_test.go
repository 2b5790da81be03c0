package controllerwatch_test

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/controllerwatch"
)

// The controller's leader Lease, last renewed 40 s ago for 15 s, says it
// has been down for 25 s; a Lease that cannot be read says nothing.
func ExampleJudge() {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	renewed := metav1.NewMicroTime(now.Add(-40 * time.Second))
	lease := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &renewed, LeaseDurationSeconds: ptr.To[int32](15)}}
	state := controllerwatch.Judge(lease, now)
	fmt.Println("down:", state.Down, "for", now.Sub(state.Since))
	fmt.Println("unread, down:", controllerwatch.Judge(nil, now).Down)
	// Output:
	// down: true for 25s
	// unread, down: false
}
