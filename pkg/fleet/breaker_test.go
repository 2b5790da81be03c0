package fleet

import (
	"maps"
	"testing"
)

func TestCountLive(t *testing.T) {
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	for _, tt := range []struct {
		name         string
		entries      []liveEntry
		want         int
		stillTracked []map[string]bool
	}{
		{"nothing released", []liveEntry{{"a/ns", []string{"p", "q"}, set()}}, 2, []map[string]bool{set()}},
		{"released Pods the collector has not reached",
			[]liveEntry{{"a/ns", []string{"p", "q", "r"}, set("q", "r")}}, 1, []map[string]bool{set("q", "r")}},
		{"released Pods gone are forgotten", []liveEntry{{"a/ns", []string{"p"}, set("q")}}, 1, []map[string]bool{set()}},
		{"no Pods", []liveEntry{{"a/ns", nil, set("q")}}, 0, []map[string]bool{set()}},
		{"two entries on one cluster and namespace count each Pod once",
			[]liveEntry{{"a/ns", []string{"p", "q"}, set()}, {"a/ns", []string{"p", "q"}, set()}}, 2, []map[string]bool{set(), set()}},
		{"a Pod released through the other entry of the same namespace",
			[]liveEntry{{"a/ns", []string{"p", "q"}, set("q")}, {"a/ns", []string{"p", "q"}, set()}}, 1, []map[string]bool{set("q"), set()}},
		{"the same names on two clusters are two Pods",
			[]liveEntry{{"a/ns", []string{"p"}, set()}, {"b/ns", []string{"p"}, set()}}, 2, []map[string]bool{set(), set()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := countLive(tt.entries); got != tt.want {
				t.Errorf("countLive = %d, want %d", got, tt.want)
			}
			for i, e := range tt.entries {
				if !maps.Equal(e.released, tt.stillTracked[i]) {
					t.Errorf("entry %d still tracks %v, want %v", i, e.released, tt.stillTracked[i])
				}
			}
		})
	}
}
