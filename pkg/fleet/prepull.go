package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/prepull"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// prepull has the nodes each cluster may put the run's sandboxes on pull
// the run's images before any pool is warmed (WithPrepull), as
// PrepullImages does, waiting up to the configured readyTimeout.
func (f *Fleet) prepull(ctx context.Context) error {
	start := time.Now()
	defer func() { f.phase("prepull", "", time.Since(start)) }()
	refs := make([]string, 0, len(f.plan.Pools))
	for _, p := range f.plan.Pools {
		refs = append(refs, p.Image)
	}
	return f.PrepullImages(ctx, refs, f.cfg.ReadyTimeout.Duration, f.driving.highWater)
}

// PrepullImages has the nodes each cluster may put the run's sandboxes on
// pull refs: one PrepullJob per cluster, labelled with the run, for the
// nodes the cluster's node selector picks that run asrl-prepull-agent. It
// waits up to timeout. What keeps a node from pulling everything — no
// agent, the disk budget, an image that fails — is told through the
// fleet's logger and does not stop the run: the sandboxes then pull for
// themselves. The jobs stay until Unprepull deletes them. A node starts
// no pull once its image filesystem is highWater percent full. A session
// pre-pulls so as its tasks are added.
func (f *Fleet) PrepullImages(ctx context.Context, refs []string, timeout time.Duration, highWater int32) error {
	if err := nodecache.CheckHighWater(highWater); err != nil {
		return fmt.Errorf("prepull: the disk high-water mark %w", err)
	}
	full, err := images.NormalizeAll(refs)
	if err != nil {
		return fmt.Errorf("prepull: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(f.clusters))
	var wg sync.WaitGroup
	for i, c := range f.clusters {
		wg.Go(func() { errs[i] = f.prepullOn(ctx, c, full, highWater) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (f *Fleet) prepullOn(ctx context.Context, c *Cluster, images []string, highWater int32) error {
	targets, without, err := prepull.Targets(ctx, c.Clients.Client, c.spec.NodeSelector)
	if err != nil {
		return fmt.Errorf("prepull on cluster %s: %w", c.Name, err)
	}
	if len(without) > 0 {
		f.log.Info("Prepull: nodes run no asrl-prepull-agent and will pull as sandboxes land", "cluster", c.Name, "nodes", len(without))
	}
	if len(targets) == 0 {
		return nil
	}
	job := &v1alpha1.PrepullJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace(), GenerateName: f.runID + "-prepull-", Labels: labels.ForRun(f.runID)},
		Spec: v1alpha1.PrepullJobSpec{Images: images, NodeSelector: c.spec.NodeSelector,
			PerNodeParallelism: 2, DiskHighWaterPercent: highWater},
	}
	if err := c.Clients.Client.Create(ctx, job); err != nil {
		return fmt.Errorf("prepull on cluster %s: creating the PrepullJob: %w", c.Name, err)
	}
	p, err := prepull.Wait(ctx, c.Clients.Client, job, targets, time.Second, func(nodecache.JobProgress) {})
	if errors.Is(err, context.DeadlineExceeded) {
		f.log.Info("Prepull: nodes not done in time; the run goes on", "cluster", c.Name, "notDone", len(p.Nodes)-p.Done, "of", len(p.Nodes))
		return nil
	}
	if err != nil {
		return fmt.Errorf("prepull on cluster %s: %w", c.Name, err)
	}
	for _, n := range p.Nodes {
		if n.Phase != v1alpha1.PrepullSucceeded {
			f.log.Info("Prepull: a node did not pull everything", "cluster", c.Name, "node", n.Node, "phase", n.Phase, "message", n.Message)
		}
	}
	return nil
}

// Unprepull deletes the run's PrepullJobs on every cluster.
func (f *Fleet) Unprepull(ctx context.Context) error {
	var errs []error
	for _, c := range f.clusters {
		if _, err := prepull.DeleteOfRun(ctx, c.Clients.Client, c.Namespace(), f.runID); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", c.Name, err))
		}
	}
	return errors.Join(errs...)
}
