package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// Acquire claims a sandbox of t's image from its warm pool and waits until
// it is Ready, for readyTimeout at most. The pool must be warm.
// annotations go on the claim: a session records there whom the sandbox
// is for, to find it again when resumed.
func (f *Fleet) Acquire(ctx context.Context, t tasks.Task, annotations map[string]string) (*Sandbox, error) {
	return f.acquire(ctx, t, annotations, nil)
}

// acquire is Acquire, calling bound, when set, once the claim names its
// sandbox (see claim.Claimer.Acquire).
func (f *Fleet) acquire(ctx context.Context, t tasks.Task, annotations map[string]string, bound func()) (*Sandbox, error) {
	f.mu.Lock()
	p, ok := f.warm[t.Image]
	var pool *extensionsv1beta1.SandboxWarmPool
	if ok {
		p.cluster.claims++
		// Warm replaces p.pool when it grows the pool; take this one.
		pool = p.pool
	}
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("task %s: no warm pool for %s", t.ID, t.Image)
	}
	// A claim the controller never makes Ready (it is down, or the claim
	// is stuck) must not hold its task for ever: readyTimeout bounds it.
	ctx, cancel := context.WithTimeout(ctx, f.cfg.ReadyTimeout.Duration)
	defer cancel()
	// Nor must a controller that is gone: past its grace the wait ends.
	ctx, unguard := p.cluster.controller.Guard(ctx, f.cfg.ControllerGrace.Duration)
	defer unguard()
	start := time.Now()
	settled := f.pace(ctx, p, pool.Name)
	h, err := p.cluster.claimer.Acquire(ctx, pool, t.ID, annotations, bound)
	settled()
	f.claimed(p.cluster.Name, err == nil, err == nil && h.Warm, time.Since(start))
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(err, cause) {
		// The wait was cut (a call cut short by it says only "context
		// canceled"): say why, for the verdict.
		err = fmt.Errorf("task %s: %w (%v)", t.ID, cause, err)
	}
	if err != nil {
		f.mu.Lock()
		p.cluster.claims--
		f.mu.Unlock()
		return nil, err
	}
	h.Cluster = p.cluster.Name
	if p.paced() {
		f.mu.Lock()
		p.held[h.Pod] = true
		f.mu.Unlock()
	}
	return &Sandbox{Handle: h, cluster: p.cluster, image: t.Image, session: f.cfg.Session}, nil
}

// paced reports whether claims wait for a warm sandbox. Under a strategy
// of single-replica pools (none) claims are meant to start cold.
func (f *Fleet) paced() bool {
	return f.cfg.ClaimPacing == "warm" && !f.cfg.Warming().OneReplica
}

// paceLimit bounds the wait for a warm sandbox: a pool that cannot refill
// (its Pods failing, the cluster full) must not stall its tasks for ever;
// after it they claim at once and may start cold.
const paceLimit = time.Minute

// pace holds a claim back, under warm claim pacing, until p's pool has a
// Ready sandbox that no other claim of the run holds or is about to take:
// a claim made on an exhausted pool makes the controller cold-start a
// sandbox while the pool also refills, which doubles the work of a control
// plane already behind. Free sandboxes are counted from the pool's Pods in
// the tracker's cache rather than from the pool's status, which lags
// adoptions. The returned func settles the claim once it has been made.
func (f *Fleet) pace(ctx context.Context, p *placed, pool string) (settled func()) {
	if !p.paced() {
		return func() {}
	}
	wait := true
	limit := time.After(paceLimit)
	select {
	case p.gate <- struct{}{}:
		defer func() { <-p.gate }()
	case <-limit:
		wait = false
	case <-ctx.Done():
		wait = false
	}
	for {
		changed := p.cluster.tracker.PoolChanged(pool)
		free := 1 // unknown: hold nothing back
		if wait {
			if pods, err := p.cluster.tracker.PoolPods(ctx, pool); err == nil {
				free = f.freeSandboxes(p, pods)
			}
		}
		f.mu.Lock()
		if free > 0 {
			p.pending++
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				p.pending--
				f.mu.Unlock()
			}
		}
		f.mu.Unlock()
		select {
		case <-changed:
		case <-limit:
			wait = false
		case <-ctx.Done():
			wait = false
		}
	}
}

// freeSandboxes counts the pool's Ready Pods that no claim of the run holds
// or is about to take, and forgets held Pods that are gone or going.
func (f *Fleet) freeSandboxes(p *placed, pods []corev1.Pod) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	live := make(map[string]bool, len(pods))
	free := 0
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		live[pod.Name] = true
		if !p.held[pod.Name] && kube.PodReady(pod) {
			free++
		}
	}
	for name := range p.held {
		if !live[name] {
			delete(p.held, name)
		}
	}
	return free - p.pending
}

// Release gives a sandbox back: its claim, and with it the sandbox, is
// deleted.
func (f *Fleet) Release(ctx context.Context, s *Sandbox) error {
	s.closeShell()
	start := time.Now()
	err := s.cluster.claimer.Release(ctx, s.Handle)
	f.phase("release", s.cluster.Name, time.Since(start))
	f.mu.Lock()
	s.cluster.claims--
	if err == nil && s.Handle.Pod != "" {
		if s.cluster.released == nil {
			s.cluster.released = map[string]bool{}
		}
		s.cluster.released[s.Handle.Pod] = true
	}
	f.mu.Unlock()
	return err
}
