package sizing

import (
	"strings"
	"testing"
)

// skewed is the spec's skewed 100-task / 8-image batch.
var skewed = []Image{
	{"django", 40}, {"astropy", 20}, {"sympy", 12}, {"flask", 8},
	{"numpy", 6}, {"scipy", 6}, {"pandas", 4}, {"pytest", 4},
}

// oneToOne is an eval sweep: one task per image.
var oneToOne = []Image{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}, {"f", 1}, {"g", 1}, {"h", 1}}

func TestReplicas(t *testing.T) {
	for _, tt := range []struct {
		name              string
		tasksImage, total int
		p                 Params
		want              int
	}{
		{"share of the budget", 40, 100, Params{MaxConcurrent: 32, MaxWarmPoolSize: 32}, 13},
		{"at least one", 4, 100, Params{MaxConcurrent: 8, MaxWarmPoolSize: 32}, 1},
		{"never more than its tasks", 4, 100, Params{MaxConcurrent: 256, MaxWarmPoolSize: 32}, 4},
		{"capped by the pool size", 40, 100, Params{MaxConcurrent: 256, MaxWarmPoolSize: 32}, 32},
		{"halves round to even", 5, 10, Params{MaxConcurrent: 5, MaxWarmPoolSize: 32}, 2},
		{"halves round to even, up", 7, 10, Params{MaxConcurrent: 5, MaxWarmPoolSize: 32}, 4},
		{"buffer within the cap", 40, 100, Params{MaxConcurrent: 8, MaxWarmPoolSize: 4, Buffer: 3}, 4},
		{"buffer", 40, 100, Params{MaxConcurrent: 8, MaxWarmPoolSize: 32, Buffer: 2}, 5},
		{"warm per task", 40, 100, Params{MaxConcurrent: 8, MaxWarmPoolSize: 32, WarmPerTask: true}, 32},
		{"warm per task, few tasks", 6, 100, Params{MaxConcurrent: 8, MaxWarmPoolSize: 32, WarmPerTask: true}, 6},
		{"no tasks", 0, 100, Params{MaxConcurrent: 8, MaxWarmPoolSize: 32}, 0},
		{"no total", 3, 0, Params{MaxConcurrent: 2, MaxWarmPoolSize: 32}, 2},
	} {
		if got := Replicas(tt.tasksImage, tt.total, tt.p); got != tt.want {
			t.Errorf("%s: Replicas(%d, %d, %+v) = %d, want %d", tt.name, tt.tasksImage, tt.total, tt.p, got, tt.want)
		}
	}
}

// The spec's numbers: warming every task's image holds 92 pods; sizing to
// the concurrency budget cuts that to 8-32; sliding bounds it to a window.
func TestSkewedBatch(t *testing.T) {
	perTask := NewPlan(skewed, Params{MaxConcurrent: 8, MaxWarmPoolSize: 32, WarmPerTask: true}, Disk{})
	if perTask.WarmFootprint != 92 {
		t.Errorf("one replica per task: footprint %d, want 92", perTask.WarmFootprint)
	}
	for _, tt := range []struct {
		maxConcurrent, footprint, sliding, pipelined int
		django                                       int
	}{
		{1, 8, 1, 1, 1},
		{8, 11, 5, 2, 3},
		{32, 32, 8, 4, 13},
		{256, 92, 8, 4, 32},
	} {
		p := NewPlan(skewed, Params{MaxConcurrent: tt.maxConcurrent, MaxWarmPoolSize: 32}, Disk{})
		if p.WarmFootprint != tt.footprint || p.SlidingWindow != tt.sliding || p.PipelinedWindow != tt.pipelined || p.Pools[0].Replicas != tt.django {
			t.Errorf("max_concurrent %d: footprint %d sliding %d pipelined %d django %d; want %d %d %d %d",
				tt.maxConcurrent, p.WarmFootprint, p.SlidingWindow, p.PipelinedWindow, p.Pools[0].Replicas,
				tt.footprint, tt.sliding, tt.pipelined, tt.django)
		}
	}
}

func TestOneToOneSweep(t *testing.T) {
	p := NewPlan(oneToOne, Params{MaxConcurrent: 4, MaxWarmPoolSize: 8}, Disk{})
	// Each image's share rounds to 0 and is raised to 1; the window fits 4.
	if p.WarmFootprint != 8 || p.SlidingWindow != 4 || p.PipelinedWindow != 2 {
		t.Errorf("plan %+v", p)
	}
	if w := NewPlan(oneToOne, Params{MaxConcurrent: 4, MaxWarmPoolSize: 8, WarmPerTask: true}, Disk{}); w.WarmFootprint != 8 {
		t.Errorf("warm per task is a no-op for 1:1 sweeps, footprint %d", w.WarmFootprint)
	}
}

func TestDiskCapsTheWindow(t *testing.T) {
	p := Params{MaxConcurrent: 8, MaxWarmPoolSize: 32}
	for _, tt := range []struct {
		name     string
		d        Disk
		resident float64
		want     int
	}{
		{"no disk figures: all fit", Disk{}, 1, 8},
		{"one node: django's 3 x 10 GB, then astropy does not fit", Disk{AvgImageGB: 10, UsableGB: 40, Nodes: 1}, 1, 1},
		{"the first image is always allowed", Disk{AvgImageGB: 10, UsableGB: 5, Nodes: 1}, 1, 1},
		{"four nodes, two windows resident", Disk{AvgImageGB: 10, UsableGB: 40, Nodes: 4}, 2, 5},
		{"everything fits", Disk{AvgImageGB: 1, UsableGB: 100, Nodes: 1}, 1, 8},
	} {
		if got := DiskWindow(skewed, p, tt.d, tt.resident); got != tt.want {
			t.Errorf("%s: DiskWindow = %d, want %d", tt.name, got, tt.want)
		}
	}
	// The pipelined window is the smaller of half the sliding window and
	// what fits twice over.
	if got := PipelinedWindow(skewed, p, Disk{AvgImageGB: 10, UsableGB: 40, Nodes: 4}); got != 2 {
		t.Errorf("PipelinedWindow = %d, want 2", got)
	}
	if got := PipelinedWindow(skewed, Params{MaxConcurrent: 256, MaxWarmPoolSize: 32}, Disk{AvgImageGB: 10, UsableGB: 100, Nodes: 1}); got != 1 {
		t.Errorf("PipelinedWindow with a small disk = %d, want 1", got)
	}
	// The sliding window is capped by the disk too, as the reference does.
	if got := SlidingWindow(skewed, p, Disk{AvgImageGB: 10, UsableGB: 40, Nodes: 1}); got != 1 {
		t.Errorf("SlidingWindow with a small disk = %d, want 1", got)
	}
	if got := SlidingWindow(skewed, p, Disk{}); got != Window(skewed, p) {
		t.Errorf("SlidingWindow with no disk figures = %d, want the budget's %d", got, Window(skewed, p))
	}
}

func TestPlanWarnings(t *testing.T) {
	p := NewPlan(skewed, Params{MaxConcurrent: 200, MaxWarmPoolSize: 16, WarmPerTask: true}, Disk{AvgImageGB: 10, UsableGB: 100, Nodes: 1})
	want := []string{
		"django has 40 tasks but maxWarmPoolSize is 16: its pool is clamped to 16, so 24 of its tasks wait",
		"astropy has 20 tasks but maxWarmPoolSize is 16",
		"maxConcurrent 200 exceeds the 100 tasks",
	}
	all := strings.Join(p.Warnings, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("warnings lack %q:\n%s", w, all)
		}
	}
	if len(p.Warnings) != len(want) {
		t.Errorf("got %d warnings, want %d:\n%s", len(p.Warnings), len(want), all)
	}
	if q := NewPlan(skewed, Params{MaxConcurrent: 8, MaxWarmPoolSize: 32}, Disk{}); len(q.Warnings) != 0 {
		t.Errorf("a sound configuration warned: %v", q.Warnings)
	}
}
