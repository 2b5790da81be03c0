package teardown

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
)

func TestOrphans(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	run := func(id string, created time.Time) inventory.Run {
		return inventory.Run{ObjectMeta: metav1.ObjectMeta{Name: id, CreationTimestamp: metav1.NewTime(created)}}
	}
	runs := []inventory.Run{
		run("alive", now.Add(-time.Hour)),
		run("dead-old", now.Add(-time.Hour)),
		run("dead-young", now.Add(-time.Minute)),
		run("dead-at-limit", now.Add(-5*time.Minute)),
		run("beating-old", now.Add(-time.Hour)),
		run("stopped-young", now.Add(-time.Minute)),
	}
	heartbeats := map[string]bool{"beating-old": false, "stopped-young": true}
	for _, tt := range []struct {
		name   string
		alive  []string
		minAge time.Duration
		want   []string
	}{
		{"alive runs and young runs are kept", []string{"alive"}, 5 * time.Minute, []string{"dead-old", "dead-at-limit", "stopped-young"}},
		{"no minimum age takes every dead run", []string{"alive"}, 0, []string{"dead-old", "dead-young", "dead-at-limit", "stopped-young"}},
		{"no alive list takes every old run without a live heartbeat", nil, 30 * time.Minute, []string{"alive", "dead-old", "stopped-young"}},
		{"everything alive", []string{"alive", "dead-old", "dead-young", "dead-at-limit", "stopped-young"}, 0, nil},
	} {
		var got []string
		for _, r := range Orphans(runs, tt.alive, heartbeats, tt.minAge, now) {
			got = append(got, r.Name)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Orphans = %v, want %v", tt.name, got, tt.want)
		}
	}
}
