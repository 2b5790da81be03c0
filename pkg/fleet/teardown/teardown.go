// Package teardown removes everything a run created in a namespace, and
// nothing else: every deletion is selected by the run's label.
package teardown

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracker"
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
	var left []string
	for kind, list := range map[string]client.ObjectList{
		"SandboxClaim":    &extensionsv1beta1.SandboxClaimList{},
		"SandboxWarmPool": &extensionsv1beta1.SandboxWarmPoolList{},
		"SandboxTemplate": &extensionsv1beta1.SandboxTemplateList{},
		"Pod":             &corev1.PodList{},
	} {
		if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(labels.ForRun(runID))); err != nil {
			return nil, fmt.Errorf("listing %s objects of run %s: %w", kind, runID, err)
		}
		items, err := apimeta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if o, ok := it.(client.Object); ok {
				left = append(left, kind+"/"+o.GetName())
			}
		}
	}
	slices.Sort(left)
	return left, nil
}
