package main

import (
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// t0 is the tests' start; at is s seconds after it.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestStorePull(t *testing.T) {
	base := v1alpha1.Layer{Digest: "b", Size: 300}
	env := v1alpha1.Layer{Digest: "e", Size: 200}
	one := v1alpha1.Layer{Digest: "1", Size: 10}
	two := v1alpha1.Layer{Digest: "2", Size: 20}
	type pull struct {
		at          float64
		layers      []v1alpha1.Layer
		wantReady   float64
		wantPulled  int64
		description string
	}
	for _, tc := range []struct {
		name  string
		held  []v1alpha1.Layer
		pulls []pull
	}{
		{"an image the node holds is there at once", []v1alpha1.Layer{base, env, one}, []pull{
			{5, []v1alpha1.Layer{base, env, one}, 5, 0, "held"},
		}},
		{"a cold image takes its bytes over the bandwidth", nil, []pull{
			{0, []v1alpha1.Layer{base, env, one}, 5.1, 510, "cold"},
		}},
		{"a sibling pulls only its own layer", []v1alpha1.Layer{base, env}, []pull{
			{0, []v1alpha1.Layer{base, env, two}, 0.2, 20, "sibling"},
		}},
		{"a layer being pulled is waited for, not pulled again", nil, []pull{
			{0, []v1alpha1.Layer{base, env, one}, 5.1, 510, "first"},
			// base and env arrive at 3 and 5; two queues behind one.
			{1, []v1alpha1.Layer{base, env, two}, 5.3, 20, "second, while the first is pulling"},
		}},
		{"a busy link delays the next pull", []v1alpha1.Layer{base}, []pull{
			{0, []v1alpha1.Layer{base, env, one}, 2.1, 210, "first"},
			{2, []v1alpha1.Layer{two}, 2.3, 20, "queued behind the first"},
			{10, []v1alpha1.Layer{base, env, two}, 10, 0, "all there by now"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(tc.held)
			for _, p := range tc.pulls {
				ready, pulled := s.pull(at(p.at), p.layers, 100, true)
				if !ready.Equal(at(p.wantReady)) || pulled != p.wantPulled {
					t.Errorf("%s: ready at %v after pulling %d bytes, want %v and %d", p.description,
						ready.Sub(t0).Seconds(), pulled, p.wantReady, p.wantPulled)
				}
			}
		})
	}
}

// An agent that stops drops the layers only its job queued that had not
// begun; the one being fetched, and those a Pod waits for, still come.
func TestStoreCancel(t *testing.T) {
	a := v1alpha1.Layer{Digest: "a", Size: 100}
	b := v1alpha1.Layer{Digest: "b", Size: 100}
	c := v1alpha1.Layer{Digest: "c", Size: 100}
	d := v1alpha1.Layer{Digest: "d", Size: 100}
	s := newStore(nil)
	// The job queues a, b, c and d, 1 s each; a Pod waits for c.
	s.pull(at(0), []v1alpha1.Layer{a, b, c, d}, 100, false)
	s.pull(at(0), []v1alpha1.Layer{c}, 100, true)
	if dropped := s.cancel(at(1.5), 100); dropped != 100 {
		t.Errorf("dropped %d bytes, want d's 100", dropped)
	}
	if !s.has([]v1alpha1.Layer{a, b}, at(2)) || !s.has([]v1alpha1.Layer{c}, at(3)) || s.has([]v1alpha1.Layer{d}, at(10)) {
		t.Error("after the cancel: want a by 1 s, b (being fetched) by 2 s, c (a Pod's) by 3 s, d never")
	}
	// A later pull of d queues it again, after what is left.
	if ready, pulled := s.pull(at(2), []v1alpha1.Layer{d}, 100, true); !ready.Equal(at(4)) || pulled != 100 {
		t.Errorf("d pulled again ready at %v after %d bytes, want 4 s and 100", ready.Sub(t0).Seconds(), pulled)
	}
}
