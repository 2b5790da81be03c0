package webhook

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// networkSync is the elected replica's writer (the manager runs it on the
// leader only) of the policies' NetworkPolicies (policy.NetworkPolicies):
// it creates what is missing, puts back what was changed and deletes what
// no policy stands behind any more — a policy's network isolation unset,
// or a namespace no longer selected. A deleted policy's go with it: it
// owns them.
type networkSync struct {
	// Cache holds the policies, the namespaces' metadata and the
	// NetworkPolicies labelled policy.NetworkIsolationLabel; Reader reads
	// one the cache cannot hold (its label taken off), Client writes.
	Cache  cache.Cache
	Reader client.Reader
	Client client.Client
}

// Start implements manager.Runnable.
func (s *networkSync) Start(ctx context.Context) error {
	return resync(ctx, s.Cache, []client.Object{&v1alpha1.SandboxPolicy{}, metadataOf(corev1.SchemeGroupVersion.WithKind("Namespace")), &networkingv1.NetworkPolicy{}},
		"Writing the SandboxPolicies' NetworkPolicies; sandbox Pods of the namespaces without theirs are denied until it succeeds",
		func(ctx context.Context) (time.Duration, error) { return 0, s.sync(ctx) })
}

// sync makes the cluster's NetworkPolicies labelled
// policy.NetworkIsolationLabel those the policies call for, going on past
// a failed write to the others.
func (s *networkSync) sync(ctx context.Context) error {
	policies := &v1alpha1.SandboxPolicyList{}
	if err := s.Cache.List(ctx, policies); err != nil {
		return err
	}
	namespaces := &metav1.PartialObjectMetadataList{}
	namespaces.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := s.Cache.List(ctx, namespaces); err != nil {
		return err
	}
	labelsOf := map[string]map[string]string{}
	for _, ns := range namespaces.Items {
		if ns.DeletionTimestamp == nil {
			labelsOf[ns.Name] = ns.Labels
		}
	}
	want, err := policy.NetworkPolicies(policies.Items, labelsOf)
	if err != nil {
		return err
	}
	have := &networkingv1.NetworkPolicyList{}
	if err := s.Cache.List(ctx, have, client.HasLabels{policy.NetworkIsolationLabel}); err != nil {
		return err
	}
	existing := map[client.ObjectKey]networkingv1.NetworkPolicy{}
	for _, np := range have.Items {
		existing[client.ObjectKeyFromObject(&np)] = np
	}
	log := klog.FromContext(ctx)
	var errs []error
	for _, np := range want {
		key := client.ObjectKeyFromObject(&np)
		old, found := existing[key]
		delete(existing, key)
		switch {
		case !found:
			err := s.Client.Create(ctx, &np)
			if apierrors.IsAlreadyExists(err) {
				err = s.restore(ctx, np)
			} else if err == nil {
				log.V(2).Info("Fenced the namespace's sandbox Pods off the network", "networkPolicy", klog.KObj(&np))
			}
			errs = append(errs, err)
		case drifted(old, np):
			errs = append(errs, s.put(ctx, old, np))
		}
	}
	for _, np := range existing {
		if ownedByPolicy(np) {
			errs = append(errs, client.IgnoreNotFound(s.Client.Delete(ctx, &np, client.Preconditions{UID: &np.UID})))
		}
	}
	return errors.Join(errs...)
}

// restore puts want in place of the NetworkPolicy of its name that the
// cache does not hold: one the cache has not seen yet, or one whose label
// was taken off.
func (s *networkSync) restore(ctx context.Context, want networkingv1.NetworkPolicy) error {
	live := &networkingv1.NetworkPolicy{}
	if err := s.Reader.Get(ctx, client.ObjectKeyFromObject(&want), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !drifted(*live, want) {
		return nil
	}
	return s.put(ctx, *live, want)
}

// put updates live to want's labels, owner and spec.
func (s *networkSync) put(ctx context.Context, live, want networkingv1.NetworkPolicy) error {
	out := live.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[policy.NetworkIsolationLabel] = want.Labels[policy.NetworkIsolationLabel]
	out.Spec, out.OwnerReferences = want.Spec, want.OwnerReferences
	if err := s.Client.Update(ctx, out); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Put back a NetworkPolicy that had been changed", "networkPolicy", klog.KObj(out))
	return nil
}

// drifted reports whether have differs from want in what makes it
// want: its spec, owner and label.
func drifted(have, want networkingv1.NetworkPolicy) bool {
	return have.Labels[policy.NetworkIsolationLabel] != want.Labels[policy.NetworkIsolationLabel] ||
		!equality.Semantic.DeepEqual(have.Spec, want.Spec) || !equality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences)
}

// ownedByPolicy reports whether np is one a SandboxPolicy controls, as
// the webhook writes them: another carrying the label is not the
// webhook's to delete.
func ownedByPolicy(np networkingv1.NetworkPolicy) bool {
	owner := metav1.GetControllerOf(&np)
	return owner != nil && owner.Kind == "SandboxPolicy" && owner.APIVersion == v1alpha1.GroupVersion.String()
}
