// Package teardown removes everything a run created in a namespace, and
// nothing else: every deletion is selected by the run's label.
package teardown

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// Run deletes the run's claims, then its warm pools, then its templates —
// one request per kind — and waits until they and the run's Pods are gone.
// Deletion is foreground, so a claim or pool only disappears once the
// Sandboxes the controller made for it (which carry no run label) have gone
// too.
func Run(ctx context.Context, c client.Client, tr *tracker.Tracker, namespace, runID string) error {
	run := client.MatchingLabels(labels.ForRun(runID))
	foreground := client.PropagationPolicy(metav1.DeletePropagationForeground)
	for _, obj := range []client.Object{
		&extensionsv1beta1.SandboxClaim{}, &extensionsv1beta1.SandboxWarmPool{}, &extensionsv1beta1.SandboxTemplate{},
	} {
		if err := c.DeleteAllOf(ctx, obj, client.InNamespace(namespace), run, foreground); err != nil {
			return fmt.Errorf("deleting the %T objects of run %s in %s: %w", obj, runID, namespace, err)
		}
	}
	return tr.WaitEmpty(ctx)
}

// Leftovers lists, as kind/name, what of run runID is still in the
// namespace, read from the API server rather than a cache.
func Leftovers(ctx context.Context, c client.Client, namespace, runID string) ([]string, error) {
	inv, err := inventory.List(ctx, c, namespace, runID)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", runID, err)
	}
	var left []string
	for _, t := range inv.Templates {
		left = append(left, "SandboxTemplate/"+t.Name)
	}
	for _, p := range inv.Pools {
		left = append(left, "SandboxWarmPool/"+p.Name)
	}
	for _, c := range inv.Claims {
		left = append(left, "SandboxClaim/"+c.Name)
	}
	for _, p := range inv.Pods {
		left = append(left, "Pod/"+p.Name)
	}
	slices.Sort(left)
	return left, nil
}

// Reap tears down run runID in the namespace of clients without the run's
// engine: for runs whose driver died (SIGKILL, OOM, a lost node) or that
// were kept warm.
func Reap(ctx context.Context, clients *kube.Clients, runID string) error {
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	tr, err := tracker.Start(watchCtx, clients.Config, clients.Namespace, runID)
	if err != nil {
		return err
	}
	return Run(ctx, clients.Client, tr, clients.Namespace, runID)
}

// Orphans picks the runs to reap: those not in alive whose oldest object is
// at least minAge old at now, so that a run still starting is never taken.
func Orphans(runs []inventory.Run, alive []string, minAge time.Duration, now time.Time) []inventory.Run {
	var out []inventory.Run
	for _, r := range runs {
		if !slices.Contains(alive, r.Name) && now.Sub(r.CreationTimestamp.Time) >= minAge {
			out = append(out, r)
		}
	}
	return out
}
