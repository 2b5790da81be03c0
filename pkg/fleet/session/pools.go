package session

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// AddTasks adds tasks to the plan; source names them in errors (e.g. "the
// request"). Tasks are checked as a task file's rows are, the config's
// rewrite rules applied; one bad task adds none.
func (s *Session) AddTasks(ts []tasks.Task, source string) (added []fleet.PoolChange, err error) {
	return s.add(len(ts), func(seen map[string]string) ([]tasks.Task, error) {
		return tasks.Check(source, ts, seen, s.fleet.Config().Rewrite)
	})
}

// AddRows adds tasks given as rows of a task file (JSON objects or images,
// tasks.Rows), read with opts and the config's rewrite rules after opts'
// own; each is named source[i] in errors. One bad row adds none.
func (s *Session) AddRows(rows []string, opts tasks.Options, source string) (added []fleet.PoolChange, err error) {
	opts.Rewrite = append(slices.Clip(opts.Rewrite), s.fleet.Config().Rewrite...)
	return s.add(len(rows), func(seen map[string]string) ([]tasks.Task, error) {
		return tasks.Rows(source, rows, seen, opts)
	})
}

// add adds the n tasks read reads, checked against the ids seen (a copy,
// kept only when all of them are added).
// They count once they are recorded in the cluster, for a resume.
func (s *Session) add(n int, read func(seen map[string]string) ([]tasks.Task, error)) ([]fleet.PoolChange, error) {
	s.adding.Lock()
	defer s.adding.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if n == 0 {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: no tasks to add", ErrInvalid)
	}
	seen := maps.Clone(s.seen)
	checked, err := read(seen)
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := s.recordTasks(s.ctx, s.fleet.Tasks(), checked); err != nil {
		return nil, verdict.Infrastructure(verdict.API, fmt.Errorf("%w; nothing was added", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.seen = seen
	changes := s.addChecked(checked)
	s.prepull(changes)
	return changes, nil
}

// recordTasks records the tasks added so far and more, the first of
// them recorded already.
func (s *Session) recordTasks(ctx context.Context, before []tasks.Task, more []tasks.Task) error {
	all := append(before[:len(before):len(before)], more...)
	return s.store.SaveTasks(ctx, all, len(before))
}

// prepull has the nodes pull the images new to the plan among changes, in
// the background, when the session pre-pulls.
func (s *Session) prepull(changes []fleet.PoolChange) {
	var fresh []string
	for _, c := range changes {
		if c.Before == 0 {
			fresh = append(fresh, c.Image)
		}
	}
	if !s.opts.Prepull || len(fresh) == 0 {
		return
	}
	s.wg.Go(func() {
		if err := s.fleet.PrepullImages(s.ctx, fresh, s.fleet.Config().ReadyTimeout.Duration, s.opts.PrepullHighWater); err != nil && s.ctx.Err() == nil {
			s.log.Error(err, "Pre-pulling the added tasks' images failed", "images", len(fresh))
		}
	})
}

// addChecked adds tasks checked already. Callers hold s.mu, or own s.
func (s *Session) addChecked(checked []tasks.Task) []fleet.PoolChange {
	if len(checked) == 0 {
		return nil
	}
	for _, t := range checked {
		s.tasks[t.ID] = t
	}
	changes := s.fleet.AddTasks(checked)
	for _, c := range changes {
		// A pool warm or warming now grows to its new size.
		if p := s.pools[c.Image]; p != nil && c.Replicas > c.Before {
			s.warmLocked(c.Image, p)
		}
	}
	return changes
}

// RunPlan plans a managed run of the session's tasks (fleet.RunPlan): the
// client runs it, window by window; nothing is created here.
func (s *Session) RunPlan(strategy string, concurrency int) (fleet.Plan, [][]string, error) {
	s.mu.Lock()
	closed, n := s.closed, len(s.tasks)
	s.mu.Unlock()
	switch {
	case closed:
		return fleet.Plan{}, nil, ErrClosed
	case n == 0:
		return fleet.Plan{}, nil, fmt.Errorf("%w: no tasks to run: add them with AddTasks first", ErrInvalid)
	}
	p, ids, err := s.fleet.RunPlan(strategy, concurrency)
	if err != nil {
		return fleet.Plan{}, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return p, ids, nil
}

// TaskCount is how many tasks the session holds.
func (s *Session) TaskCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tasks)
}

// imagesOf resolves task ids and images to the images of the plan.
// Callers hold s.mu.
func (s *Session) imagesOf(taskIDs, images []string) ([]string, error) {
	var out []string
	for _, id := range taskIDs {
		t, ok := s.tasks[id]
		if !ok {
			return nil, fmt.Errorf("%w: no task %q in this session: add it with AddTasks first", ErrNotFound, id)
		}
		out = append(out, t.Image)
	}
	for _, img := range images {
		if s.fleet.Planned(img) == 0 {
			return nil, fmt.Errorf("%w: no task of image %q in this session: add one with AddTasks first", ErrNotFound, img)
		}
		out = append(out, img)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Lookahead starts warming the pools of taskIDs' and images' images and
// returns at once.
func (s *Session) Lookahead(taskIDs, images []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	imgs, err := s.imagesOf(taskIDs, images)
	if err != nil {
		return nil, err
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("%w: name the tasks or images to warm", ErrInvalid)
	}
	for _, img := range imgs {
		s.want(img)
	}
	return imgs, nil
}

// want marks img as wanted now and warms its pool unless it is warm or
// warming. Callers hold s.mu.
func (s *Session) want(img string) *pool {
	p := s.pools[img]
	if p == nil {
		p = &pool{}
		s.pools[img] = p
	}
	p.lastWanted = time.Now()
	if p.warming == nil && (p.err != nil || !s.isWarm(img)) {
		s.warmLocked(img, p)
	}
	return p
}

func (s *Session) isWarm(img string) bool {
	st, err := s.fleet.PoolState(s.ctx, img)
	return err == nil && st.Replicas > 0
}

// warmLocked warms img's pool to its planned size in the background, or
// asks the warm in flight to go again. Callers hold s.mu.
func (s *Session) warmLocked(img string, p *pool) {
	if p.warming != nil {
		p.again = true
		return
	}
	p.warming, p.err = make(chan struct{}), nil
	done := p.warming
	s.wg.Go(func() {
		for {
			ctx, cancel := context.WithTimeout(s.ctx, s.fleet.Config().ReadyTimeout.Duration)
			want := s.fleet.Planned(img)
			err := s.fleet.Warm(ctx, []string{img}, func(string) int { return want })
			cancel()
			if err != nil && s.ctx.Err() == nil {
				s.log.Error(err, "Giving up a pool", "image", img)
				if uerr := s.fleet.Unwarm(context.WithoutCancel(s.ctx), []string{img}); uerr != nil {
					s.log.Error(uerr, "Removing a pool failed", "image", img)
				}
			}
			s.mu.Lock()
			if p.again && err == nil {
				p.again = false
				s.mu.Unlock()
				continue
			}
			p.again, p.err, p.warming = false, err, nil
			close(done)
			s.mu.Unlock()
			return
		}
	})
}

// PoolStatus is an image's pool in the session.
type PoolStatus struct {
	fleet.PoolState
	Tasks, Desired int
	Err            error
	LastWanted     time.Time
}

// Pools lists the pools of images, or of every image of the plan when none
// is named, sorted by image.
func (s *Session) Pools(ctx context.Context, images []string) ([]PoolStatus, error) {
	s.mu.Lock()
	if len(images) == 0 {
		for _, p := range s.fleet.Plan().Pools {
			images = append(images, p.Image)
		}
	}
	tasksOf := map[string]int{}
	for _, p := range s.fleet.Plan().Pools {
		tasksOf[p.Image] = p.Tasks
	}
	out := make([]PoolStatus, 0, len(images))
	for _, img := range images {
		ps := PoolStatus{Tasks: tasksOf[img], Desired: s.fleet.Planned(img)}
		if p := s.pools[img]; p != nil {
			ps.Err, ps.LastWanted = p.err, p.lastWanted
		}
		out = append(out, ps)
	}
	s.mu.Unlock()
	for i, img := range images {
		st, err := s.fleet.PoolState(ctx, img)
		if err != nil {
			return nil, verdict.Infrastructure(verdict.API, err)
		}
		out[i].PoolState = st
	}
	slices.SortFunc(out, func(a, b PoolStatus) int { return strings.Compare(a.Image, b.Image) })
	return out, nil
}

// WaitPoolsReady waits until the pools of images (every pool the session
// warms when none is named) have all their sandboxes Ready, have been given
// up, or timeout passes. Not being ready is no error: the pools say how far
// they got.
func (s *Session) WaitPoolsReady(ctx context.Context, images []string, timeout time.Duration) (bool, []PoolStatus, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, nil, ErrClosed
	}
	var err error
	if len(images) > 0 {
		images, err = s.imagesOf(nil, images)
	} else {
		images = slices.Sorted(maps.Keys(s.pools))
		if len(images) == 0 {
			err = fmt.Errorf("%w: no pool is warming, so none would become ready: ask for them first with Lookahead (lookahead() in Python) or Acquire", ErrNotWarming)
		}
	}
	if err == nil {
		var cold []string
		for _, img := range images {
			if s.pools[img] == nil {
				cold = append(cold, img)
			}
		}
		if len(cold) > 0 {
			err = fmt.Errorf("%w: no pool is warming for %s, so it would not become ready: ask for it first with Lookahead (lookahead() in Python) or Acquire", ErrNotWarming, strings.Join(cold, ", "))
		}
	}
	s.mu.Unlock()
	if err != nil {
		return false, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		changed := s.fleet.Changed()
		pools, err := s.Pools(ctx, images)
		if err != nil {
			return false, nil, err
		}
		ready := true
		for _, p := range pools {
			if p.Err == nil && (!p.Warm || p.Ready < p.Desired) {
				ready = false
			}
		}
		if ready {
			return true, pools, nil
		}
		select {
		case <-ctx.Done():
			return false, pools, nil
		case <-changed:
		case <-time.After(time.Second):
			// A pool given up changes no object; look again.
		}
	}
}
