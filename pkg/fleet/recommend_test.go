package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/capacity"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
)

func TestRecommend(t *testing.T) {
	const gib = capacity.GiB
	node := func(name string, cpu, pods, disk int64) capacity.Node {
		return capacity.Node{Name: name, CPUMilli: cpu * 1000, MemoryBytes: 128 * gib, Pods: pods, ImageFSBytes: disk * gib}
	}
	// Eight images of 5 GiB, held by no node.
	images := func(spec string) []capacity.Image {
		var out []capacity.Image
		for _, img := range imagesOf(batch(spec)) {
			out = append(out, capacity.Image{Name: img.Name, Tasks: img.Tasks, Layers: []v1alpha1.Layer{{Digest: img.Name, Size: 5 * gib}}})
		}
		return out
	}
	const sweep = "a b c d e f g h"
	m := capacity.Model{PullBytesPerSecond: gib, TaskTime: 5 * time.Minute, ClaimsPerSecond: 20, ImageBytes: 10 * gib}
	for _, tt := range []struct {
		name       string
		spec       string
		nodes      []capacity.Node
		model      func(*capacity.Model)
		strategy   string
		bottleneck string
		rl         bool
	}{
		{"everything fits: warm it all", sweep, []capacity.Node{node("n", 32, 110, 500)}, nil, "naive", "none", false},
		{"two CPUs hold eight sandboxes", sweep, []capacity.Node{node("n", 2, 110, 500)}, nil, "", "cpu", false},
		{"five pods", sweep, []capacity.Node{node("n", 32, 5, 500)}, nil, "", "pods", false},
		{"a disk of two images", sweep, []capacity.Node{node("n", 32, 110, 13)}, nil, "", "image disk", false},
		{"a slow registry", sweep, []capacity.Node{node("n", 32, 110, 500)},
			func(m *capacity.Model) { m.PullBytesPerSecond, m.TaskTime = 10<<20, 10*time.Second }, "", "pull bandwidth", false},
		{"RL: eight rollouts an image", "aaaaaaaa bbbbbbbb", []capacity.Node{node("n", 32, 110, 500)}, nil, "naive", "none", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			model := m
			if tt.model != nil {
				tt.model(&model)
			}
			ts := batch(tt.spec)
			r, err := Recommend(cfg, ts, capacity.Probe{Cluster: "c", Nodes: tt.nodes, Images: images(tt.spec)}, model)
			if err != nil {
				t.Fatal(err)
			}
			if tt.strategy != "" && r.Config.Strategy != tt.strategy {
				t.Errorf("strategy %s, want %s (%s)", r.Config.Strategy, tt.strategy, strings.Join(r.Reasons, "; "))
			}
			if r.Chosen.Bottleneck != tt.bottleneck {
				t.Errorf("bottleneck %q, want %q (%+v)", r.Chosen.Bottleneck, tt.bottleneck, r.WhatIf)
			}
			if r.Config.WarmPerTask != tt.rl || r.Config.Colocate != tt.rl {
				t.Errorf("warmPerTask %v, colocate %v, want both %v", r.Config.WarmPerTask, r.Config.Colocate, tt.rl)
			}
			if r.Plan.Peak.Pods > mustFit(t, r) {
				t.Errorf("the plan's peak of %d sandboxes does not fit the node's %d", r.Plan.Peak.Pods, mustFit(t, r))
			}
			for _, s := range r.WhatIf {
				if s.Estimate.Wall < r.Chosen.Estimate.Wall {
					t.Errorf("%s at %d is predicted faster (%s) than the choice (%s)", s.Strategy, s.Concurrency, s.Estimate.Wall, r.Chosen.Estimate.Wall)
				}
			}
		})
	}
}

func mustFit(t *testing.T, r Recommendation) int {
	t.Helper()
	n, _ := r.Limits.Fit()
	return n
}

func TestRecommendRefuses(t *testing.T) {
	cfg := config.Default()
	m := capacity.Model{PullBytesPerSecond: 1, TaskTime: time.Second, ClaimsPerSecond: 1}
	if _, err := Recommend(cfg, batch("a"), capacity.Probe{Cluster: "c"}, m); err == nil || !strings.Contains(err.Error(), "no node matches") {
		t.Errorf("no nodes: %v", err)
	}
	tiny := capacity.Probe{Cluster: "c", Nodes: []capacity.Node{{Name: "n", CPUMilli: 100, MemoryBytes: 1 << 30, Pods: 10}}}
	if _, err := Recommend(cfg, batch("a"), tiny, m); err == nil || !strings.Contains(err.Error(), "hold no sandbox") {
		t.Errorf("a node smaller than a sandbox: %v", err)
	}
}

// A resource the sandbox does not request holds any number of sandboxes,
// said so in the reasons instead of as a sentinel count.
func TestHeld(t *testing.T) {
	unrequested := capacity.NewLimits(capacity.Totals{CPUMilli: 4000, MemoryBytes: capacity.GiB, Pods: 10}, capacity.Sandbox{CPUMilli: 500})
	if got := held(unrequested.Memory); got != "any number" {
		t.Errorf("memory not requested: held = %q", got)
	}
	if got := held(unrequested.CPU); got != "8" {
		t.Errorf("4 CPUs of 500m sandboxes: held = %q, want 8", got)
	}
}
