package main

import (
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// store is a simulated node's image store and the link it pulls over.
type store struct {
	// idle is when the pulls queued on the link so far are done.
	idle time.Time
	// arrival is when each layer the node holds or is pulling is there
	// (the zero time for a layer it held from the start).
	arrival map[string]time.Time
	// size is the size of each layer; forPod says which a Pod waits for
	// (the kubelet pulls them), not only a PrepullJob.
	size   map[string]int64
	forPod map[string]bool
}

func newStore(held []v1alpha1.Layer) *store {
	s := &store{arrival: map[string]time.Time{}, size: map[string]int64{}, forPod: map[string]bool{}}
	for _, l := range held {
		s.arrival[l.Digest] = time.Time{}
		s.size[l.Digest] = l.Size
	}
	return s
}

// layers are the layers the node holds or is pulling, each once.
func (s *store) layers() []v1alpha1.Layer {
	out := make([]v1alpha1.Layer, 0, len(s.arrival))
	for digest := range s.arrival {
		out = append(out, v1alpha1.Layer{Digest: digest, Size: s.size[digest]})
	}
	return out
}

// pull queues the layers the node neither holds nor is pulling, one after
// another on its link at bandwidth bytes a second (containerd fetches a few
// at once, but over the one link), and returns when all of layers are on
// the node and how many bytes it had to pull. A layer another pull is
// already fetching is waited for, not fetched again. forPod is a Pod's
// pull, by the kubelet; else a PrepullJob's, by the agent.
func (s *store) pull(now time.Time, layers []v1alpha1.Layer, bandwidth float64, forPod bool) (ready time.Time, pulled int64) {
	ready = now
	for _, l := range layers {
		if forPod {
			s.forPod[l.Digest] = true
		}
		at, ok := s.arrival[l.Digest]
		if !ok {
			start := s.idle
			if start.Before(now) {
				start = now
			}
			at = start.Add(time.Duration(float64(l.Size) / bandwidth * float64(time.Second)))
			s.idle, s.arrival[l.Digest] = at, at
			s.size[l.Digest] = l.Size
			pulled += l.Size
		}
		if at.After(ready) {
			ready = at
		}
	}
	return ready, pulled
}

// cancel drops, at now, the queued layers no Pod waits for and whose
// fetch has not begun, as an agent stopping ends its pulls (the one being
// fetched completes), and returns their bytes. The layers queued behind
// them keep their times: a little late, never early.
func (s *store) cancel(now time.Time, bandwidth float64) (dropped int64) {
	s.idle = now
	for digest, at := range s.arrival {
		size := s.size[digest]
		begins := at.Add(-time.Duration(float64(size) / bandwidth * float64(time.Second)))
		switch {
		case !s.forPod[digest] && begins.After(now):
			delete(s.arrival, digest)
			dropped += size
		case at.After(s.idle):
			s.idle = at
		}
	}
	return dropped
}

// has reports whether all of layers are on the node at now.
func (s *store) has(layers []v1alpha1.Layer, now time.Time) bool {
	for _, l := range layers {
		if at, ok := s.arrival[l.Digest]; !ok || at.After(now) {
			return false
		}
	}
	return true
}
