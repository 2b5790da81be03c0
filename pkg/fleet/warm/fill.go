package warm

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracker"
)

// Pool is one image's template and warm pool, at its final size.
type Pool struct {
	Template *extensionsv1beta1.SandboxTemplate
	Pool     *extensionsv1beta1.SandboxWarmPool
}

// Fill creates each template and warm pool and grows the pools wave by wave
// (see Waves), returning once every pool has all its replicas Ready. A
// pool is created at its first wave's size, then patched up.
func Fill(ctx context.Context, c client.Client, tr *tracker.Tracker, pools []Pool, budget int) error {
	replicas := make([]int32, len(pools))
	for i, p := range pools {
		replicas[i] = *p.Pool.Spec.Replicas
	}
	created := make([]bool, len(pools))
	for _, wave := range Waves(replicas, budget) {
		for _, s := range wave {
			p := pools[s.Pool]
			if !created[s.Pool] {
				if err := c.Create(ctx, p.Template.DeepCopy()); err != nil {
					return fmt.Errorf("creating SandboxTemplate %s: %w", p.Template.Name, err)
				}
				pool := p.Pool.DeepCopy()
				pool.Spec.Replicas = &s.Replicas
				if err := c.Create(ctx, pool); err != nil {
					return fmt.Errorf("creating SandboxWarmPool %s: %w", pool.Name, err)
				}
				created[s.Pool] = true
				continue
			}
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, s.Replicas))
			if err := c.Patch(ctx, p.Pool.DeepCopy(), patch); err != nil {
				return fmt.Errorf("growing SandboxWarmPool %s to %d: %w", p.Pool.Name, s.Replicas, err)
			}
		}
		for _, s := range wave {
			if _, err := tr.WaitPoolReady(ctx, pools[s.Pool].Pool.Name, s.Replicas); err != nil {
				return err
			}
		}
	}
	return nil
}
