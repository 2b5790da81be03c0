package capacity_test

import (
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/capacity"
)

const gib = capacity.GiB

func TestLimits(t *testing.T) {
	totals := capacity.Totals{Nodes: 2, CPUMilli: 8000, MemoryBytes: 64 * gib, Pods: 220}
	for _, tt := range []struct {
		name    string
		sandbox capacity.Sandbox
		want    int
		by      string
	}{
		{"cpu", capacity.Sandbox{CPUMilli: 250, MemoryBytes: 512 << 20}, 32, "cpu"},
		{"memory", capacity.Sandbox{CPUMilli: 100, MemoryBytes: 4 * gib}, 16, "memory"},
		{"pods", capacity.Sandbox{CPUMilli: 10, MemoryBytes: 64 << 20}, 220, "pods"},
		{"nothing requested", capacity.Sandbox{}, 220, "pods"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, by := capacity.NewLimits(totals, tt.sandbox).Fit()
			if n != tt.want || by != tt.by {
				t.Errorf("Fit = %d by %s, want %d by %s", n, by, tt.want, tt.by)
			}
		})
	}
}

func TestPredict(t *testing.T) {
	// x is an 8 GiB base and 2 GiB of its own; node a holds the base. No
	// node lists y: it is one layer of the assumed 3 GiB.
	base, own := v1alpha1.Layer{Digest: "base", Size: 8 * gib}, v1alpha1.Layer{Digest: "x", Size: 2 * gib}
	probe := capacity.Probe{
		Nodes:  []capacity.Node{{Name: "a", Holds: map[string]bool{"base": true}}, {Name: "b"}},
		Images: []capacity.Image{{Name: "x", Tasks: 4, Layers: []v1alpha1.Layer{base, own}}, {Name: "y", Tasks: 4}},
	}
	m := capacity.Model{PullBytesPerSecond: gib / 8, TaskTime: time.Minute, ClaimsPerSecond: 1, ImageBytes: 3 * gib}
	x, y := capacity.WarmPool{Image: "x", Tasks: 4, Replicas: 2}, capacity.WarmPool{Image: "y", Tasks: 4, Replicas: 2}
	for _, tt := range []struct {
		name  string
		shape capacity.Shape
		want  capacity.Estimate
	}{
		// x's replicas go to a (2 GiB) and b (10 GiB), y's to b and a
		// (3 GiB each): b's 13 GiB at 1/8 GiB/s is 104 s. Two waves of
		// 4: 2 min. 8 claims at 1/s: 8 s.
		{"naive pulls then runs", capacity.Shape{Strategy: "naive", Concurrency: 4, Windows: [][]capacity.WarmPool{{x, y}}},
			capacity.Estimate{Pull: 104 * time.Second, Tasks: 2 * time.Minute, Claims: 8 * time.Second, Wall: 224 * time.Second, Bound: "tasks"}},
		// Colocated, x goes to a alone (2 GiB), y to b (3 GiB): 24 s.
		{"colocated replicas pull once", capacity.Shape{Strategy: "naive", Concurrency: 8, Colocate: true, Windows: [][]capacity.WarmPool{{x, y}}},
			capacity.Estimate{Pull: 24 * time.Second, Tasks: time.Minute, Claims: 8 * time.Second, Wall: 84 * time.Second, Bound: "tasks"}},
		// Pipelined hides y's pull (24 s) behind x's window, after x's
		// own (b's 10 GiB, 80 s).
		{"pipelined hides later pulls", capacity.Shape{Strategy: "pipelined", Concurrency: 4, Windows: [][]capacity.WarmPool{{x}, {y}}},
			capacity.Estimate{Pull: 104 * time.Second, Tasks: 2 * time.Minute, Claims: 8 * time.Second, Wall: 200 * time.Second, Bound: "tasks"}},
		// A window of 4 tasks at a concurrency of 8 runs 4 at once.
		{"a window's tasks bound its wave", capacity.Shape{Strategy: "sliding", Concurrency: 8, Windows: [][]capacity.WarmPool{{x}, {y}}},
			capacity.Estimate{Pull: 104 * time.Second, Tasks: 2 * time.Minute, Claims: 8 * time.Second, Wall: 224 * time.Second, Bound: "tasks"}},
		{"three epochs", capacity.Shape{Strategy: "naive", Concurrency: 8, Epochs: 3, Windows: [][]capacity.WarmPool{{x, y}}},
			capacity.Estimate{Pull: 104 * time.Second, Tasks: 3 * time.Minute, Claims: 24 * time.Second, Wall: 284 * time.Second, Bound: "tasks"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := capacity.Predict(probe, tt.shape, m); got != tt.want {
				t.Errorf("Predict = %+v, want %+v", got, tt.want)
			}
		})
	}

	slowPull := m
	slowPull.PullBytesPerSecond = gib / 128
	if e := capacity.Predict(probe, capacity.Shape{Strategy: "naive", Concurrency: 8, Windows: [][]capacity.WarmPool{{x, y}}}, slowPull); e.Bound != "pull" {
		t.Errorf("at 8 MiB/s the pulls should bound the run: %+v", e)
	}
	fastTasks := m
	fastTasks.TaskTime, fastTasks.ClaimsPerSecond = time.Second, 0.05
	if e := capacity.Predict(probe, capacity.Shape{Strategy: "naive", Concurrency: 8, Windows: [][]capacity.WarmPool{{x, y}}}, fastTasks); e.Bound != "control-plane" {
		t.Errorf("at a claim every 20 s the control plane should bound the run: %+v", e)
	}
}

func TestBottleneck(t *testing.T) {
	for _, tt := range []struct {
		bound       string
		concurrency int
		limitedBy   string
		want        string
	}{
		{"pull", 4, "cpu", "pull bandwidth"},
		{"control-plane", 4, "cpu", "control plane"},
		{"tasks", 4, "cpu", "cpu"},
		{"tasks", 4, "image disk", "image disk"},
		{"tasks", 10, "cpu", "none"},
	} {
		if got := capacity.Bottleneck(capacity.Estimate{Bound: tt.bound}, tt.concurrency, 10, tt.limitedBy); got != tt.want {
			t.Errorf("Bottleneck(%s, %d of 10, %s) = %s, want %s", tt.bound, tt.concurrency, tt.limitedBy, got, tt.want)
		}
	}
}

func TestPools(t *testing.T) {
	base, own := v1alpha1.Layer{Digest: "base", Size: 6 * gib}, v1alpha1.Layer{Digest: "x", Size: 4 * gib}
	p := capacity.Probe{
		Nodes: []capacity.Node{
			{Name: "a", Pool: "big", CPUMilli: 4000, Pods: 110, EphemeralBytes: 100 * gib, ImageFSBytes: 200 * gib, Holds: map[string]bool{"base": true}},
			{Name: "b", Pool: "big", CPUMilli: 4000, Pods: 110, EphemeralBytes: 100 * gib},
			{Name: "c", CPUMilli: 1000, Pods: 10, EphemeralBytes: 10 * gib, Holds: map[string]bool{"x": true}},
		},
		Images: []capacity.Image{{Name: "x", Layers: []v1alpha1.Layer{base, own}}, {Name: "x-too", Layers: []v1alpha1.Layer{base}}, {Name: "unknown"}},
	}
	pools := p.Pools()
	if len(pools) != 2 || pools[0].Name != "(no pool label)" || pools[1].Name != "big" {
		t.Fatalf("Pools = %+v", pools)
	}
	if got := pools[1]; got.Nodes != 2 || got.CPUMilli != 8000 || got.DiskBytes != 300*gib || got.CachedNodes != 1 || got.ToPullBytes != 4*gib || got.ImageBytes != 10*gib {
		t.Errorf("the big pool: %+v (its disk is a's image filesystem and b's ephemeral storage; a holds the base, counted once)", got)
	}
	if got := pools[0]; got.ToPullBytes != 6*gib {
		t.Errorf("the unlabelled pool lacks %d of the layers, want the base's 6 GiB", got.ToPullBytes)
	}
}
