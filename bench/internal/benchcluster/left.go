package benchcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// NothingLeft waits up to a minute for nothing of the run to be left in
// ns — no claim, pool, template, Sandbox, Pod or PrepullJob — as the garbage
// collector and the nodes finish what the engine's teardown deleted.
func NothingLeft(ctx context.Context, c client.Client, ns string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var left []string
		for _, list := range []client.ObjectList{&extensionsv1beta1.SandboxClaimList{}, &extensionsv1beta1.SandboxWarmPoolList{},
			&extensionsv1beta1.SandboxTemplateList{}, &sandboxv1beta1.SandboxList{}, &corev1.PodList{}, &v1alpha1.PrepullJobList{}} {
			if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
				return err
			}
			if n := apimeta.LenList(list); n > 0 {
				left = append(left, fmt.Sprintf("%d %T", n, list))
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the run left %v in %s a minute after it ended", left, ns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
