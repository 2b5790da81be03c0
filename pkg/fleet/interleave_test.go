package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

func TestInterleave(t *testing.T) {
	for _, tt := range []struct {
		in, want string
	}{
		{"aaaa", "a0 a1 a2 a3"},
		{"aa bb", "a0 b0 a1 b1"},
		{"aaaa bb", "a0 b0 a1 a2 b1 a3"},
		{"aaaaaa bbb c", "a0 b0 a1 a2 b1 c0 a3 a4 b2 a5"},
		{"", ""},
	} {
		var got []string
		for _, task := range Interleave(batch(tt.in)) {
			got = append(got, task.ID)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("Interleave(%q) = %v, want %s", tt.in, got, tt.want)
		}
	}
}

// Any stretch of the order holds each image about in proportion to its
// share of the tasks: the 12:8:6:4:4:2:2:2 batch never puts more of an
// image's tasks among the first k than its share of k, plus one.
func TestInterleaveShares(t *testing.T) {
	var ts []tasks.Task
	sizes := []int{12, 8, 6, 4, 4, 2, 2, 2}
	for i, n := range sizes {
		for j := range n {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("%d-%d", i, j), Image: fmt.Sprint(i)})
		}
	}
	out := Interleave(ts)
	if len(out) != len(ts) {
		t.Fatalf("%d tasks out of %d", len(out), len(ts))
	}
	for k := 1; k <= len(out); k++ {
		per := map[string]int{}
		for _, task := range out[:k] {
			per[task.Image]++
		}
		for i, n := range sizes {
			share := float64(n) * float64(k) / float64(len(ts))
			if got := float64(per[fmt.Sprint(i)]); got > share+1 {
				t.Errorf("first %d tasks hold %v of image %d, more than its share %.1f + 1", k, got, i, share)
			}
		}
	}
	ids := make([]string, len(out))
	for i, task := range out {
		ids[i] = task.ID
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != len(ts) {
		t.Error("tasks lost or repeated")
	}
}
