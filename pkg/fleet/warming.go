package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/placement"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/warm"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
)

// place chooses a cluster for image's pool of replicas and counts them
// there. Callers hold f.mu.
func (f *Fleet) place(image string, replicas int) (*Cluster, error) {
	targets := make([]placement.Target, len(f.clusters))
	for i, c := range f.clusters {
		targets[i] = placement.Target{Name: c.Name, Weight: c.config.Weight, MaxReplicas: c.config.MaxReplicas,
			Replicas: c.replicas, Claims: c.claims, Lacking: c.lacking}
	}
	i, err := f.policy.Choose(image, replicas, targets)
	if err != nil {
		return nil, fmt.Errorf("placing the pool of %s: %w", image, err)
	}
	return f.clusters[i], nil
}

// Warm makes the pools of images warm with replicas(image) sandboxes each,
// filling each cluster's share in waves of the create budget, and returns
// once all are Ready. Images already warm are grown if asked for more,
// never shrunk. Pools that cannot become Ready are returned, from every
// cluster, as one WarmError.
func (f *Fleet) Warm(ctx context.Context, images []string, replicas func(image string) int) error {
	byCluster := map[*Cluster][]warm.Pool{}
	f.mu.Lock()
	for _, img := range images {
		want := replicas(img)
		p, ok := f.warm[img]
		if ok && p.replicas >= want {
			byCluster[p.cluster] = append(byCluster[p.cluster], warm.Pool{Template: p.template, Pool: p.pool})
			continue
		}
		if !ok {
			c, err := f.place(img, want)
			if err != nil {
				f.mu.Unlock()
				return err
			}
			tmpl, err := f.templateOf(c, img)
			if err != nil {
				f.mu.Unlock()
				return err
			}
			p = &placed{cluster: c, template: tmpl}
			// A planned image's pool holds no sandbox to wait for.
			if f.paced() && len(f.plannedNodes(img)) == 0 {
				p.held, p.gate = map[string]bool{}, make(chan struct{}, 1)
			}
			f.warm[img] = p
		}
		p.pool = resources.WarmPool(p.template, int32(want))
		p.cluster.replicas += want - p.replicas
		f.warmed(p.cluster.Name, want-p.replicas)
		p.replicas = want
		byCluster[p.cluster] = append(byCluster[p.cluster], warm.Pool{Template: p.template, Pool: p.pool})
	}
	f.mu.Unlock()

	f.stats.warming.Add(int64(len(images)))
	defer f.stats.warming.Add(-int64(len(images)))
	type filled struct {
		cluster *Cluster
		err     error
	}
	done := make(chan filled, len(byCluster))
	for c, pools := range byCluster {
		go func() {
			filler := &warm.Filler{Client: c.Clients.Client, Tracker: c.tracker, Budget: *f.cfg.WarmCreateBudget,
				Observe: func(phase string, d time.Duration) { f.phase(phase, c.Name, d) },
				Check:   f.poolCheck(ctx, c),
				Settled: func(pool, why string) {
					f.log.Info("A pool serves with fewer sandboxes than planned", "pool", pool, "why", why)
				}}
			// Pools wait for the controller no longer than its grace.
			gctx, unguard := c.controller.Guard(ctx, f.cfg.ControllerGrace.Duration)
			defer unguard()
			err := filler.Fill(gctx, pools)
			if cause := context.Cause(gctx); err != nil && ctx.Err() == nil && cause != nil && !errors.Is(err, cause) {
				// The guard cut the fill (a call cut short says only
				// "context canceled"): say why, for the run's error
				// and the verdict.
				err = fmt.Errorf("%w (%v)", cause, err)
			}
			done <- filled{c, err}
		}()
	}
	// Pool names are unique over the clusters, so their failures merge.
	failed := WarmError{}
	var hard []error
	for range byCluster {
		r := <-done
		var some WarmError
		switch {
		case errors.As(r.err, &some):
			maps.Copy(failed, some)
		case r.err != nil:
			hard = append(hard, fmt.Errorf("cluster %s: %w", r.cluster.Name, r.err))
		}
	}
	if len(hard) > 0 {
		return errors.Join(hard...)
	}
	if len(failed) > 0 {
		return failed
	}
	return nil
}

// templateOf is the SandboxTemplate of image's pool on c. Callers hold
// f.mu.
func (f *Fleet) templateOf(c *Cluster, image string) (*extensionsv1beta1.SandboxTemplate, error) {
	spec := c.spec
	spec.OriginalImage = f.originals[image]
	spec.Nodes = f.plannedNodes(image)
	return resources.Template(c.Namespace(), f.runID, image, spec)
}

// plannedNodes are the hostname labels of the nodes the pull plan runs
// image on; none without a plan. Callers hold f.mu.
func (f *Fleet) plannedNodes(image string) []string {
	if f.pulls == nil {
		return nil
	}
	return f.pulls.on[image]
}

// graces is how long sandboxes may be in trouble that can clear up before
// they are given up: for as long as readyTimeout allows when fail-fast is
// off.
func graces(cfg config.Fleet) claim.Grace {
	if cfg.FailFast != nil && !*cfg.FailFast {
		return claim.Grace{}
	}
	return claim.Grace{Backoff: cfg.ClaimGrace.Duration, Unschedulable: cfg.UnschedulableGrace.Duration}
}

// poolCheck judges a pool that is not Ready replica by replica (see
// claim.PoolPatience): it is given up only when none of it can serve.
func (f *Fleet) poolCheck(ctx context.Context, c *Cluster) warm.Check {
	var mu sync.Mutex
	patience := map[string]*claim.PoolPatience{}
	return func(pool string, want int32) (claim.PoolJudgement, error) {
		pods, err := c.tracker.PoolPods(ctx, pool)
		if err != nil {
			return claim.PoolJudgement{}, err
		}
		mu.Lock()
		defer mu.Unlock()
		p := patience[pool]
		if p == nil {
			p = &claim.PoolPatience{Grace: graces(f.cfg)}
			patience[pool] = p
		}
		return p.Judge(pods, int(want), time.Now()), nil
	}
}

// drain scales image's pool to no sandboxes, once the last of the pass's
// tasks of the image has a claim naming its own, Ready or not: a pool
// refills what each claim takes from it, and a refill no task will claim
// only holds a node's slot — on a full cluster, the slot the image's last
// cold sandbox, or a later window's, waits for. A later Warm grows it
// again. A failure is logged: the run goes on with the refills.
func (f *Fleet) drain(ctx context.Context, image string) {
	f.mu.Lock()
	p, ok := f.warm[image]
	if !ok || p.replicas == 0 {
		f.mu.Unlock()
		return
	}
	p.cluster.replicas -= p.replicas
	f.warmed(p.cluster.Name, -p.replicas)
	p.replicas = 0
	p.pool = resources.WarmPool(p.template, 0)
	pool := p.pool.DeepCopy()
	c := p.cluster
	f.mu.Unlock()
	noReplicas := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
	if err := client.IgnoreNotFound(c.Clients.Client.Patch(ctx, pool, noReplicas)); err != nil && ctx.Err() == nil {
		f.log.Error(err, "Scaling a pool whose tasks all have their sandboxes to none failed; its refills stay until the pool goes", "cluster", c.Name, "pool", pool.Name)
	}
}

// Unwarm deletes the pools and templates of images, and releases the
// clean sandboxes kept for them. It does not wait for their sandboxes to
// go; teardown does.
func (f *Fleet) Unwarm(ctx context.Context, images []string) error {
	errs := []error{f.releaseClean(ctx, images)}
	for _, img := range images {
		f.mu.Lock()
		p, ok := f.warm[img]
		delete(f.warm, img)
		var objs []client.Object
		if ok {
			p.cluster.replicas -= p.replicas
			f.warmed(p.cluster.Name, -p.replicas)
			objs = []client.Object{p.pool.DeepCopy(), p.template.DeepCopy()}
		}
		f.mu.Unlock()
		if !ok {
			continue
		}
		c := p.cluster.Clients.Client
		background := client.PropagationPolicy(metav1.DeletePropagationBackground)
		for _, obj := range objs {
			if err := client.IgnoreNotFound(c.Delete(ctx, obj, background)); err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: deleting %s: %w", p.cluster.Name, obj.GetName(), err))
			}
		}
	}
	return errors.Join(errs...)
}
