package webhook

import (
	"context"
	"maps"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// Counts gathers, per policy, the Pods mutated and denied, and adds them
// to each policy's status every Interval — never from the admission path,
// which stays free of writes. Replicas add their own counts; a conflict is
// retried on a fresh read.
type Counts struct {
	Client   client.Client
	Interval time.Duration

	mu      sync.Mutex
	pending map[string]delta
}

type delta struct{ mutated, denied int64 }

func (c *Counts) mutated(set policy.Set) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range set {
		c.add(p.Name, delta{mutated: 1})
	}
}

func (c *Counts) denied(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		c.add(n, delta{denied: 1})
	}
}

// add records d for policy name; callers hold c.mu.
func (c *Counts) add(name string, d delta) {
	if c.pending == nil {
		c.pending = map[string]delta{}
	}
	have := c.pending[name]
	c.pending[name] = delta{have.mutated + d.mutated, have.denied + d.denied}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica counts its own admissions.
func (c *Counts) NeedLeaderElection() bool { return false }

// Start flushes the counts every Interval until ctx ends, then once more.
func (c *Counts) Start(ctx context.Context) error {
	interval := c.Interval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			c.flush(flushCtx)
			return nil
		case <-ticker.C:
			c.flush(ctx)
		}
	}
}

func (c *Counts) flush(ctx context.Context) {
	c.mu.Lock()
	pending := maps.Clone(c.pending)
	clear(c.pending)
	c.mu.Unlock()
	for name, d := range pending {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := &v1alpha1.SandboxPolicy{}
			if err := c.Client.Get(ctx, types.NamespacedName{Name: name}, p); err != nil {
				return err
			}
			p.Status.MutatedPods += d.mutated
			p.Status.DeniedPods += d.denied
			return c.Client.Status().Update(ctx, p)
		})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.ErrorS(err, "updating the counts of a SandboxPolicy", "policy", name)
			c.mu.Lock()
			c.add(name, d)
			c.mu.Unlock()
		}
	}
}
