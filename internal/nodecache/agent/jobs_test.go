package agent

import (
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

func TestReportDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		changed bool
		since   time.Duration
		want    bool
	}{
		{"changed", true, time.Second, true},
		{"unchanged, written lately", false, v1alpha1.PrepullHeartbeat - time.Second, false},
		// A long pull still tells the job the agent is there.
		{"unchanged for a heartbeat", false, v1alpha1.PrepullHeartbeat, true},
	} {
		if got := reportDue(tc.changed, t0, t0.Add(tc.since)); got != tc.want {
			t.Errorf("%s: reportDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}
