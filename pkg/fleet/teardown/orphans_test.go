package teardown

import (
	"slices"
	"testing"
	"time"
)

func TestOrphans(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	runs := []RunInfo{
		{ID: "alive", Oldest: now.Add(-time.Hour)},
		{ID: "dead-old", Oldest: now.Add(-time.Hour)},
		{ID: "dead-young", Oldest: now.Add(-time.Minute)},
		{ID: "dead-at-limit", Oldest: now.Add(-5 * time.Minute)},
	}
	for _, tt := range []struct {
		name   string
		alive  []string
		minAge time.Duration
		want   []string
	}{
		{"alive runs and young runs are kept", []string{"alive"}, 5 * time.Minute, []string{"dead-old", "dead-at-limit"}},
		{"no minimum age takes every dead run", []string{"alive"}, 0, []string{"dead-old", "dead-young", "dead-at-limit"}},
		{"no alive list takes every old run", nil, 30 * time.Minute, []string{"alive", "dead-old"}},
		{"everything alive", []string{"alive", "dead-old", "dead-young", "dead-at-limit"}, 0, nil},
	} {
		var got []string
		for _, r := range Orphans(runs, tt.alive, tt.minAge, now) {
			got = append(got, r.ID)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Orphans = %v, want %v", tt.name, got, tt.want)
		}
	}
}
