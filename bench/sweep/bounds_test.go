package main

import (
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/swebench"
)

func TestSweepBounds(t *testing.T) {
	layer := func(digest string, size int64) v1alpha1.Layer { return v1alpha1.Layer{Digest: digest, Size: size} }
	base, envA, envB := layer("base", 100), layer("env-a", 40), layer("env-b", 20)
	a := swebench.Image{Name: "a", Layers: []v1alpha1.Layer{base, envA}}
	b := swebench.Image{Name: "b", Layers: []v1alpha1.Layer{base, envB}}
	baseOnly := swebench.Image{Name: "base", Layers: []v1alpha1.Layer{base}}
	times := func(img swebench.Image, n int) []swebench.Image {
		var out []swebench.Image
		for range n {
			out = append(out, img)
		}
		return out
	}
	for _, tt := range []struct {
		name       string
		tasks      []swebench.Image
		held       [][]swebench.Image
		cpus       int
		wantWall   time.Duration
		wantPulled int64
	}{
		// 14 s for the first pull at 10 B/s, then two waves of 10 s.
		{"a bare node pulls before its first task", times(a, 4), [][]swebench.Image{nil}, 2, 34 * time.Second, 140},
		// The first node runs at once, the other after its 14 s pull:
		// by 24 s they have run 2 + 1 tasks.
		{"a node holding the image starts at once", times(a, 3), [][]swebench.Image{{a}, nil}, 1, 24 * time.Second, 0},
		// The node lacks 20 B of b, its first pull; each layer no node
		// holds is pulled at least once: env-a and env-b.
		{"shared layers held are not pulled", append(times(a, 1), b), [][]swebench.Image{{baseOnly}}, 1, 22 * time.Second, 60},
		{"no nodes prove nothing of the wall", times(a, 2), nil, 1, 0, 140},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := sweepBounds(tt.tasks, tt.held, tt.cpus, 10*time.Second, 10)
			if got.wall.Round(10*time.Millisecond) != tt.wantWall || got.pulled != tt.wantPulled {
				t.Errorf("sweepBounds = wall %v, pulled %d; want %v, %d", got.wall, got.pulled, tt.wantWall, tt.wantPulled)
			}
		})
	}
}
