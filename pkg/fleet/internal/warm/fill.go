package warm

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// Pool is one image's template and warm pool, at its final size.
type Pool struct {
	Template *extensionsv1beta1.SandboxTemplate
	Pool     *extensionsv1beta1.SandboxWarmPool
}

// Filler fills warm pools in one namespace.
type Filler struct {
	Client  client.Client
	Tracker *tracker.Tracker
	// Budget is the most sandbox creates a wave asks for; 0 is no limit.
	Budget int
	// Observe, when set, is told how long each wave took to create
	// (create_warmpool) and to become Ready (wait_pool_ready).
	Observe func(phase string, d time.Duration)
	// Check, when set, judges a pool while it is not Ready.
	Check Check
	// Settled, when set, is told of a pool that serves with fewer
	// sandboxes Ready than it wants, and why.
	Settled func(pool, why string)
}

// Check judges a pool that wants want replicas and is not Ready: give it
// up (an error, or GiveUp: none of it can serve), settle for the replicas
// Ready, or wait — at most Recheck when that is not 0.
type Check func(pool string, want int32) (claim.PoolJudgement, error)

// Fill creates each template and warm pool and grows the pools wave by wave
// (see Waves), returning once every pool has all its replicas Ready. A
// pool is created at its first wave's size, then patched up. Pools that
// already exist (kept warm by an earlier pass or run) are grown, never
// shrunk. Pools that Check gives up, or that have no sandbox Ready when
// ctx ends, are returned as a verdict.WarmError while the others fill on; a pool that
// Check settles, or that has some sandboxes Ready when ctx ends, serves
// with those and grows no further. Any other error ends the fill.
func (f *Filler) Fill(ctx context.Context, pools []Pool) error {
	failed := verdict.WarmError{}
	settled := map[string]bool{}
	replicas := make([]int32, len(pools))
	for i, p := range pools {
		replicas[i] = *p.Pool.Spec.Replicas
	}
	created := make([]bool, len(pools))
	current := make([]int32, len(pools))
	for _, wave := range Waves(replicas, f.Budget) {
		start := time.Now()
		// A wave's pools are created or grown concurrently: one after
		// another, twenty images' templates and pools took a second
		// before the first claim. Each step has a pool of its own.
		var writes errgroup.Group
		writes.SetLimit(parallelWrites)
		for _, s := range wave {
			p := pools[s.Pool]
			if failed[p.Pool.Name] != nil || settled[p.Pool.Name] {
				continue
			}
			writes.Go(func() error {
				if !created[s.Pool] {
					have, err := f.create(ctx, p, s.Replicas)
					if err != nil {
						return err
					}
					created[s.Pool], current[s.Pool] = true, have
				}
				if s.Replicas <= current[s.Pool] {
					return nil
				}
				patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, s.Replicas))
				if err := f.Client.Patch(ctx, p.Pool.DeepCopy(), patch); err != nil {
					return fmt.Errorf("growing SandboxWarmPool %s to %d: %w", p.Pool.Name, s.Replicas, err)
				}
				current[s.Pool] = s.Replicas
				return nil
			})
		}
		if err := writes.Wait(); err != nil {
			return err
		}
		f.observe("create_warmpool", start)
		start = time.Now()
		for _, s := range wave {
			name := pools[s.Pool].Pool.Name
			if failed[name] != nil || settled[name] {
				continue
			}
			why, err := f.waitReady(ctx, name, s.Replicas)
			switch {
			case err != nil:
				failed[name] = err
			case why != "":
				settled[name] = true
				if f.Settled != nil {
					f.Settled(name, why)
				}
			}
		}
		f.observe("wait_pool_ready", start)
	}
	if len(failed) > 0 {
		return failed
	}
	return nil
}

// waitReady waits until pool has ready Ready sandboxes. It returns why
// when the pool is to serve with fewer, and an error when it is given up.
func (f *Filler) waitReady(ctx context.Context, pool string, ready int32) (settle string, err error) {
	for {
		changed := f.Tracker.PoolChanged(pool)
		p, found, err := f.Tracker.WarmPool(ctx, pool)
		if err != nil {
			return "", err
		}
		have := int32(0)
		if found {
			have = p.Status.ReadyReplicas
		}
		if have >= ready {
			return "", nil
		}
		var wake <-chan time.Time
		if f.Check != nil {
			j, err := f.Check(pool, ready)
			switch {
			case err != nil:
				return "", err
			case j.GiveUp:
				return "", fmt.Errorf("pool %s: %s", pool, j.Reason())
			case j.Settle:
				return fmt.Sprintf("%d of %d sandboxes Ready; %s", j.Ready, ready, j.Reason()), nil
			case j.Recheck > 0:
				wake = time.After(j.Recheck)
			}
		}
		select {
		case <-ctx.Done():
			if have > 0 {
				return fmt.Sprintf("%d of %d sandboxes Ready when the wait ended: %v", have, ready, context.Cause(ctx)), nil
			}
			return "", fmt.Errorf("warm pool %s has none of %d sandboxes ready: %w", pool, ready, context.Cause(ctx))
		case <-changed:
		case <-wake:
		}
	}
}

// create creates p's template and pool at replicas and returns the pool's
// size: replicas, or what an existing pool of the same name already has.
func (f *Filler) create(ctx context.Context, p Pool, replicas int32) (int32, error) {
	if err := f.Client.Create(ctx, p.Template.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, fmt.Errorf("creating SandboxTemplate %s: %w", p.Template.Name, err)
	}
	pool := p.Pool.DeepCopy()
	pool.Spec.Replicas = &replicas
	err := f.Client.Create(ctx, pool)
	if err == nil {
		return replicas, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return 0, fmt.Errorf("creating SandboxWarmPool %s: %w", pool.Name, err)
	}
	existing := &extensionsv1beta1.SandboxWarmPool{}
	if err := f.Client.Get(ctx, client.ObjectKeyFromObject(pool), existing); err != nil {
		return 0, fmt.Errorf("reading the existing SandboxWarmPool %s: %w", pool.Name, err)
	}
	if existing.Spec.Replicas == nil {
		return 0, nil
	}
	return *existing.Spec.Replicas, nil
}

// parallelWrites bounds the pool writes in flight, well within the
// client's burst (kube.Limits).
const parallelWrites = 16

func (f *Filler) observe(phase string, start time.Time) {
	if f.Observe != nil {
		f.Observe(phase, time.Since(start))
	}
}
