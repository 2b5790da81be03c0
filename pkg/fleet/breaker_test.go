package fleet

import (
	"maps"
	"testing"
)

func TestUnreleased(t *testing.T) {
	for _, tt := range []struct {
		name         string
		live         []string
		released     map[string]bool
		want         int
		stillTracked map[string]bool
	}{
		{"nothing released", []string{"a", "b"}, map[string]bool{}, 2, map[string]bool{}},
		{"released Pods the collector has not reached", []string{"a", "b", "c"}, map[string]bool{"b": true, "c": true}, 1, map[string]bool{"b": true, "c": true}},
		{"released Pods gone are forgotten", []string{"a"}, map[string]bool{"b": true}, 1, map[string]bool{}},
		{"no Pods", nil, map[string]bool{"b": true}, 0, map[string]bool{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			released := maps.Clone(tt.released)
			if got := unreleased(tt.live, released); got != tt.want {
				t.Errorf("unreleased = %d, want %d", got, tt.want)
			}
			if !maps.Equal(released, tt.stillTracked) {
				t.Errorf("still tracked %v, want %v", released, tt.stillTracked)
			}
		})
	}
}
