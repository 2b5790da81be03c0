package warm

import (
	"reflect"
	"testing"
)

func TestWaves(t *testing.T) {
	for _, tt := range []struct {
		name     string
		replicas []int32
		budget   int
		want     [][]Step
	}{
		{"no budget: one wave", []int32{3, 2}, 0, [][]Step{{{0, 3}, {1, 2}}}},
		{"budget covers all", []int32{3, 2}, 5, [][]Step{{{0, 3}, {1, 2}}}},
		{"pools fill in order", []int32{2, 2, 2}, 4, [][]Step{{{0, 2}, {1, 2}}, {{2, 2}}}},
		{"a pool spans waves", []int32{5, 1}, 2, [][]Step{{{0, 2}}, {{0, 4}}, {{0, 5}, {1, 1}}}},
		{"a wave ends inside a pool", []int32{1, 3}, 2, [][]Step{{{0, 1}, {1, 1}}, {{1, 3}}}},
		{"empty pools are skipped", []int32{0, 2, 0}, 1, [][]Step{{{1, 1}}, {{1, 2}}}},
	} {
		if got := Waves(tt.replicas, tt.budget); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Waves(%v, %d) = %v, want %v", tt.name, tt.replicas, tt.budget, got, tt.want)
		}
	}
}

// Whatever the budget, no wave adds more than it and every pool ends full.
func TestWavesInvariants(t *testing.T) {
	replicas := []int32{40, 20, 12, 8, 6, 6, 4, 4}
	for budget := 1; budget <= 110; budget++ {
		final := make([]int32, len(replicas))
		for _, wave := range Waves(replicas, budget) {
			added := int32(0)
			for _, s := range wave {
				if s.Replicas <= final[s.Pool] {
					t.Fatalf("budget %d: step %+v does not grow pool %d from %d", budget, s, s.Pool, final[s.Pool])
				}
				added += s.Replicas - final[s.Pool]
				final[s.Pool] = s.Replicas
			}
			if int(added) > budget {
				t.Fatalf("budget %d: a wave adds %d", budget, added)
			}
		}
		if !reflect.DeepEqual(final, replicas) {
			t.Fatalf("budget %d: pools end at %v, want %v", budget, final, replicas)
		}
	}
}
