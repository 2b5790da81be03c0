// Package placement chooses the cluster (or node pool) for each image's warm
// pool when a fleet spans several. Policies are pure over a snapshot of the
// targets' load, so they are table-tested and cost nothing to call.
package placement

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
)

// Target is a cluster as placement sees it.
type Target struct {
	Name string
	// Weight is the target's share under capacity-weighted placement.
	Weight float64
	// MaxReplicas caps the warm replicas placed here; 0 is no cap.
	MaxReplicas int
	// Replicas and Claims are the run's current load on the target.
	Replicas int
	Claims   int
	// Lacking is, for each image whose layers some node's cache knows, the
	// fewest bytes of it one of the target's nodes lacks (0: a node has it
	// all; all of it: no node has any, or none runs an agent), from the
	// NodeImageCaches of the nodes the target's selector picks.
	Lacking map[string]int64
}

func (t Target) fits(need int) bool { return t.MaxReplicas == 0 || t.Replicas+need <= t.MaxReplicas }

// ErrNoCapacity is returned when no target can take a pool.
var ErrNoCapacity = errors.New("no cluster has room for the pool")

// Policy picks the index of the target for a pool of need replicas of image.
type Policy interface {
	Choose(image string, need int, targets []Target) (int, error)
}

// New returns the named policy: round-robin, least-loaded,
// capacity-weighted or image-affinity.
func New(name string) (Policy, error) {
	switch name {
	case "round-robin":
		return &RoundRobin{}, nil
	case "least-loaded":
		return LeastLoaded{}, nil
	case "capacity-weighted":
		return CapacityWeighted{}, nil
	case "image-affinity":
		return ImageAffinity{}, nil
	default:
		return nil, fmt.Errorf("unknown placement %q: use round-robin, least-loaded, capacity-weighted or image-affinity", name)
	}
}

// eligible lists the targets with room for need replicas.
func eligible(need int, targets []Target) ([]int, error) {
	var idx []int
	for i, t := range targets {
		if t.fits(need) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		full := make([]string, len(targets))
		for i, t := range targets {
			full[i] = fmt.Sprintf("%s %d/%d", t.Name, t.Replicas, t.MaxReplicas)
		}
		return nil, fmt.Errorf("%w of %d replicas (%s): raise maxReplicas or add a cluster", ErrNoCapacity, need, strings.Join(full, ", "))
	}
	return idx, nil
}

// RoundRobin cycles through the targets in their configured order,
// skipping those without room. It is safe for concurrent use.
type RoundRobin struct {
	mu   sync.Mutex
	next int
}

func (r *RoundRobin) Choose(_ string, need int, targets []Target) (int, error) {
	idx, err := eligible(need, targets)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	start := r.next
	r.next++
	r.mu.Unlock()
	// Rotate over the fixed order, not the eligible set, so that a full
	// target does not reshuffle the rotation.
	for k := range targets {
		if i := (start + k) % len(targets); slices.Contains(idx, i) {
			return i, nil
		}
	}
	return idx[0], nil
}

// LeastLoaded picks the target with the fewest active claims, then the
// fewest warm replicas, then the first configured.
type LeastLoaded struct{}

func (LeastLoaded) Choose(_ string, need int, targets []Target) (int, error) {
	idx, err := eligible(need, targets)
	if err != nil {
		return 0, err
	}
	best := idx[0]
	for _, i := range idx[1:] {
		a, b := targets[i], targets[best]
		if a.Claims < b.Claims || (a.Claims == b.Claims && a.Replicas < b.Replicas) {
			best = i
		}
	}
	return best, nil
}

// CapacityWeighted picks the target with the highest weight per replica it
// already holds, so pools spread in proportion to the weights.
type CapacityWeighted struct{}

func (CapacityWeighted) Choose(_ string, need int, targets []Target) (int, error) {
	idx, err := eligible(need, targets)
	if err != nil {
		return 0, err
	}
	best, bestScore := idx[0], -1.0
	for _, i := range idx {
		if score := targets[i].Weight / float64(1+targets[i].Replicas); score > bestScore {
			best, bestScore = i, score
		}
	}
	return best, nil
}

// ImageAffinity sends an image where its bytes already are: to the
// target with the node lacking the fewest of them, by the nodes' caches
// (least loaded among equals). Without that signal — no target's caches
// know the image — it sends an image to the same target every time,
// chosen by a hash of the image over the targets' names, so its pool and
// the layers its nodes pull are reused. A full target falls back to
// LeastLoaded.
type ImageAffinity struct{}

func (ImageAffinity) Choose(image string, need int, targets []Target) (int, error) {
	idx, err := eligible(need, targets)
	if err != nil {
		return 0, err
	}
	if i, ok := leastLacking(image, idx, targets); ok {
		return i, nil
	}
	// Sorted names make the mapping independent of configuration order.
	order := make([]int, len(targets))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(targets[a].Name, targets[b].Name) })
	h := fnv.New64a()
	h.Write([]byte(image))
	if i := order[h.Sum64()%uint64(len(order))]; targets[i].fits(need) {
		return i, nil
	}
	return LeastLoaded{}.Choose(image, need, targets)
}

// leastLacking is the eligible target lacking the fewest bytes of image,
// the least loaded among equals; false when no target has a Lacking entry
// for it. (The fleet gives every target one once any target's caches
// know the image's layers.)
func leastLacking(image string, eligible []int, targets []Target) (int, bool) {
	var tied []Target
	var at []int
	best := int64(-1)
	for _, i := range eligible {
		lacking, ok := targets[i].Lacking[image]
		if !ok {
			continue
		}
		switch {
		case best < 0 || lacking < best:
			best, tied, at = lacking, []Target{targets[i]}, []int{i}
		case lacking == best:
			tied, at = append(tied, targets[i]), append(at, i)
		}
	}
	if best < 0 {
		return 0, false
	}
	i, _ := LeastLoaded{}.Choose(image, 0, tied)
	return at[i], true
}
