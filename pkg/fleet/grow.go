package fleet

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// A session (package session) grows a fleet's tasks while it runs, instead
// of running a batch. The methods below serve it; they must not be used
// while Run runs.

// PoolChange is a pool whose planned size changed when tasks were added.
type PoolChange struct {
	Image, Pool string
	// Before is 0 for an image new to the plan.
	Before, Replicas int
}

// AddTasks adds ts, which must be checked already (tasks.Check), to the
// fleet and plans it again: every image's pool is its share of the
// concurrency, within maxWarmPoolSize. It returns the pools whose planned
// size changed. Pools already warm are grown by the next Warm of their
// image, never shrunk.
func (f *Fleet) AddTasks(ts []tasks.Task) []PoolChange {
	f.mu.Lock()
	defer f.mu.Unlock()
	before := map[string]int{}
	for _, p := range f.plan.Pools {
		before[p.Image] = p.Replicas
	}
	f.tasks = append(f.tasks, ts...)
	for _, t := range ts {
		if t.OriginalImage != "" {
			f.originals[t.Image] = t.OriginalImage
		}
	}
	f.plan = newPlan(f.cfg, f.tasks, false)
	f.stats.total.Add(int64(len(ts)))
	var changes []PoolChange
	for _, p := range f.plan.Pools {
		if p.Replicas != before[p.Image] {
			changes = append(changes, PoolChange{Image: p.Image, Pool: resources.PoolName(f.runID, p.Image), Before: before[p.Image], Replicas: p.Replicas})
		}
	}
	return changes
}

// Planned is the planned size of image's pool, 0 for an image no task has.
func (f *Fleet) Planned(image string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.plan.Pools {
		if p.Image == image {
			return p.Replicas
		}
	}
	return 0
}

// PoolState is an image's pool as the fleet knows it now.
type PoolState struct {
	Image, Pool, Cluster string
	// Warm is true while the pool exists; Ready counts its Ready sandboxes
	// (from the tracker's cache), Replicas its size.
	Warm            bool
	Replicas, Ready int
}

// PoolState reads image's pool from the tracker's cache.
func (f *Fleet) PoolState(ctx context.Context, image string) (PoolState, error) {
	st := PoolState{Image: image, Pool: resources.PoolName(f.runID, image)}
	f.mu.Lock()
	p, ok := f.warm[image]
	if ok {
		st.Cluster, st.Replicas = p.cluster.Name, p.replicas
	}
	f.mu.Unlock()
	if !ok {
		return st, nil
	}
	pool, found, err := p.cluster.tracker.WarmPool(ctx, st.Pool)
	if err != nil || !found {
		return st, err
	}
	st.Warm, st.Ready = true, int(pool.Status.ReadyReplicas)
	return st, nil
}

// Changed returns a channel closed at the next change of any of the run's
// objects on any cluster.
func (f *Fleet) Changed() <-chan struct{} {
	if len(f.clusters) == 1 {
		return f.clusters[0].tracker.Changed()
	}
	out := make(chan struct{})
	var once sync.Once
	for _, c := range f.clusters {
		go func(ch <-chan struct{}) {
			select {
			case <-ch:
				once.Do(func() { close(out) })
			case <-out:
			}
		}(c.tracker.Changed())
	}
	return out
}

// Tasks are the run's tasks, in order: those Open was given, then those
// a session added.
func (f *Fleet) Tasks() []tasks.Task {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tasks)
}

// RunPlan plans a managed run of the tasks added so far under strategy and
// concurrency (the configuration's where empty or 0): the plan, and each
// of its windows' task ids, in the order the tasks were added.
func (f *Fleet) RunPlan(strategy string, concurrency int) (Plan, [][]string, error) {
	cfg, ts := f.cfg, f.Tasks()
	cfg.Strategy = cmp.Or(strategy, cfg.Strategy)
	cfg.Concurrency = cmp.Or(concurrency, cfg.Concurrency)
	if err := cfg.Validate(); err != nil {
		return Plan{}, nil, err
	}
	p := newPlan(cfg, ts, false)
	windowOf := map[string]int{}
	for i, w := range p.Windows {
		for _, img := range w.Images {
			windowOf[img] = i
		}
	}
	ids := make([][]string, len(p.Windows))
	for _, t := range ts {
		i := windowOf[t.Image]
		ids[i] = append(ids[i], t.ID)
	}
	return p, ids, nil
}
