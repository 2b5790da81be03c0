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
}

func newStore(held []v1alpha1.Layer) *store {
	s := &store{arrival: map[string]time.Time{}}
	for _, l := range held {
		s.arrival[l.Digest] = time.Time{}
	}
	return s
}

// pull queues the layers the node neither holds nor is pulling, one after
// another on its link at bandwidth bytes a second (containerd fetches a few
// at once, but over the one link), and returns when all of layers are on
// the node and how many bytes it had to pull. A layer another Pod's pull
// is already fetching is waited for, not fetched again.
func (s *store) pull(now time.Time, layers []v1alpha1.Layer, bandwidth float64) (ready time.Time, pulled int64) {
	ready = now
	for _, l := range layers {
		at, ok := s.arrival[l.Digest]
		if !ok {
			start := s.idle
			if start.Before(now) {
				start = now
			}
			at = start.Add(time.Duration(float64(l.Size) / bandwidth * float64(time.Second)))
			s.idle, s.arrival[l.Digest] = at, at
			pulled += l.Size
		}
		if at.After(ready) {
			ready = at
		}
	}
	return ready, pulled
}
