// Package teardown removes everything a run created in a namespace, and
// nothing else: every deletion is selected by the run's label.
package teardown

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/heartbeat"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// Run tears run runID down as fast as the API server and the controller
// allow, and returns once the API server — not only the watch cache —
// shows none of its claims, warm pools, templates, Sandboxes or Pods left.
//
// What makes Sandboxes goes first: the claims and pools, one request per
// kind, so that nothing new is made for the run. Then the Sandboxes they
// owned (found by owner before they went: Sandboxes carry no run label)
// are deleted directly and in parallel, not left to the garbage
// collector, which would take them one rate-limited queue hop after their
// owner; their Pods follow them through the collector, one hop, and are
// never deleted while their Sandbox could still make them anew. A run Pod
// whose Sandbox is gone, which nothing else would delete, is deleted here
// (deleteStrays).
//
// Every step is safe to repeat, so the whole is tried again while the API
// server cannot be reached (a restart at the end of a run), until ctx ends.
func Run(ctx context.Context, c client.Client, tr *tracker.Tracker, namespace, runID string) error {
	for {
		err := tearDown(ctx, c, tr, namespace, runID)
		if err == nil || !kube.Transient(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

func tearDown(ctx context.Context, c client.Client, tr *tracker.Tracker, namespace, runID string) error {
	sandboxes, err := sandboxesOf(ctx, c, namespace, runID)
	if err != nil {
		return err
	}
	run := client.MatchingLabels(labels.ForRun(runID))
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	deleteAll := func(obj client.Object) func() error {
		return func() error {
			if err := c.DeleteAllOf(ctx, obj, client.InNamespace(namespace), run, background); err != nil {
				return fmt.Errorf("deleting the %T objects of run %s in %s: %w", obj, runID, namespace, err)
			}
			return nil
		}
	}
	var makers errgroup.Group
	makers.Go(deleteAll(&extensionsv1beta1.SandboxClaim{}))
	makers.Go(deleteAll(&extensionsv1beta1.SandboxWarmPool{}))
	if err := makers.Wait(); err != nil {
		return err
	}
	var rest errgroup.Group
	rest.SetLimit(parallelDeletes)
	rest.Go(deleteAll(&extensionsv1beta1.SandboxTemplate{}))
	for _, sb := range sandboxes {
		rest.Go(func() error { return deleteSandbox(ctx, c, sb) })
	}
	if err := rest.Wait(); err != nil {
		return fmt.Errorf("run %s: %w", runID, err)
	}
	for {
		// The watch cache says when to look; the API server says whether
		// it is so. A watch that missed an event, around an API server
		// restart, must not end a teardown early nor hold it forever.
		waitCtx, cancel := context.WithTimeout(ctx, verifyEvery)
		err := tr.WaitEmpty(waitCtx)
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("run %s: %w", runID, errors.Join(err, context.Cause(ctx)))
		}
		inv, err := inventory.List(ctx, c, namespace, runID)
		if err != nil {
			return fmt.Errorf("run %s: %w", runID, err)
		}
		left, err := stillThere(ctx, c, namespace, sandboxes)
		if err != nil {
			return fmt.Errorf("run %s: %w", runID, err)
		}
		if len(inv.Claims)+len(inv.Pools)+len(inv.Templates)+len(inv.Pods)+len(left) == 0 {
			return nil
		}
		if err := deleteStrays(ctx, c, inv.Pods); err != nil {
			return fmt.Errorf("run %s: %w", runID, err)
		}
	}
}

// parallelDeletes bounds the deletions in flight, well within the client's
// burst (kube.Limits).
const parallelDeletes = 32

// sandboxesOf lists the Sandboxes that run runID's claims and warm pools
// control.
func sandboxesOf(ctx context.Context, c client.Client, namespace, runID string) ([]*sandboxv1beta1.Sandbox, error) {
	owners := map[types.UID]bool{}
	run := []client.ListOption{client.InNamespace(namespace), client.MatchingLabels(labels.ForRun(runID))}
	claims := &extensionsv1beta1.SandboxClaimList{}
	pools := &extensionsv1beta1.SandboxWarmPoolList{}
	if err := c.List(ctx, claims, run...); err != nil {
		return nil, fmt.Errorf("listing the claims of run %s: %w", runID, err)
	}
	if err := c.List(ctx, pools, run...); err != nil {
		return nil, fmt.Errorf("listing the warm pools of run %s: %w", runID, err)
	}
	for i := range claims.Items {
		owners[claims.Items[i].UID] = true
	}
	for i := range pools.Items {
		owners[pools.Items[i].UID] = true
	}
	return sandboxesWhere(ctx, c, namespace, owners, func(sb *sandboxv1beta1.Sandbox) types.UID {
		if ref := metav1.GetControllerOf(sb); ref != nil {
			return ref.UID
		}
		return ""
	})
}

// sandboxesWhere lists the Sandboxes in namespace whose key is in uids;
// none when uids is empty, without asking.
func sandboxesWhere(ctx context.Context, c client.Client, namespace string, uids map[types.UID]bool, key func(*sandboxv1beta1.Sandbox) types.UID) ([]*sandboxv1beta1.Sandbox, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	all := &sandboxv1beta1.SandboxList{}
	if err := c.List(ctx, all, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the Sandboxes in %s: %w", namespace, err)
	}
	var out []*sandboxv1beta1.Sandbox
	for i := range all.Items {
		if uids[key(&all.Items[i])] {
			out = append(out, &all.Items[i])
		}
	}
	return out, nil
}

// deleteSandbox deletes sb, the very object found (a UID precondition).
// One already gone is fine; so is one this user may not delete: its owner
// is gone, so the garbage collector takes it, only later.
func deleteSandbox(ctx context.Context, c client.Client, sb *sandboxv1beta1.Sandbox) error {
	err := c.Delete(ctx, sb, client.Preconditions{UID: &sb.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err), apierrors.IsForbidden(err):
		return nil
	default:
		return fmt.Errorf("deleting Sandbox %s: %w", sb.Name, err)
	}
}

// stillThere lists those of sandboxes the API server still holds.
func stillThere(ctx context.Context, c client.Client, namespace string, sandboxes []*sandboxv1beta1.Sandbox) ([]*sandboxv1beta1.Sandbox, error) {
	ours := map[types.UID]bool{}
	for _, sb := range sandboxes {
		ours[sb.UID] = true
	}
	return sandboxesWhere(ctx, c, namespace, ours, func(sb *sandboxv1beta1.Sandbox) types.UID { return sb.UID })
}

// verifyEvery is how long teardown trusts its watch before asking the API
// server whether the run is gone.
const verifyEvery = 5 * time.Second

// deleteStrays deletes those of a run's Pods that no Sandbox owns. Such a
// Pod has no owner left for the garbage collector to act on; once, after
// an API server restart, a run ended with one still there.
func deleteStrays(ctx context.Context, c client.Client, pods []corev1.Pod) error {
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		stray, err := ownerGone(ctx, c, pod)
		if err != nil {
			return err
		}
		if !stray {
			continue
		}
		err = c.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		case err != nil:
			return fmt.Errorf("Pod %s has no Sandbox left to delete it, and deleting it failed: %w; to fix: delete it (kubectl -n %s delete pod %s), or allow this user to delete pods", pod.Name, err, pod.Namespace, pod.Name)
		}
	}
	return nil
}

// ownerGone reports whether the Sandbox that controls pod no longer
// exists, or the pod has no controller at all.
func ownerGone(ctx context.Context, c client.Client, pod *corev1.Pod) (bool, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return true, nil
	}
	if ref.Kind != "Sandbox" {
		return false, nil
	}
	owner := &sandboxv1beta1.Sandbox{}
	err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}, owner)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading Sandbox %s, owner of Pod %s: %w", ref.Name, pod.Name, err)
	}
	return owner.UID != ref.UID, nil
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
	if err := Run(ctx, clients.Client, tr, clients.Namespace, runID); err != nil {
		return err
	}
	// The heartbeat of a driver that died goes last: until the rest is
	// gone, an expired heartbeat keeps marking the run an orphan.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: heartbeat.Name(runID), Namespace: clients.Namespace}}
	if err := client.IgnoreNotFound(clients.Client.Delete(ctx, lease)); err != nil {
		return fmt.Errorf("deleting the heartbeat Lease of run %s: %w", runID, err)
	}
	return nil
}

// Orphans picks the runs to reap: those not in alive whose driver's
// heartbeat Lease (package heartbeat) has expired — however young — and,
// among runs with no heartbeat at all (a driver older than heartbeats),
// those whose oldest object is at least minAge old at now. A run whose
// driver still renews its heartbeat is never taken, however old.
// heartbeats maps a run id to whether its Lease has expired.
func Orphans(runs []inventory.Run, alive []string, heartbeats map[string]bool, minAge time.Duration, now time.Time) []inventory.Run {
	var out []inventory.Run
	for _, r := range runs {
		expired, beats := heartbeats[r.Name]
		switch {
		case slices.Contains(alive, r.Name):
		case beats && expired:
			out = append(out, r)
		case !beats && now.Sub(r.CreationTimestamp.Time) >= minAge:
			out = append(out, r)
		}
	}
	return out
}

// Heartbeats reads the heartbeat Leases of the runs in the namespace of
// clients: run id -> whether it has expired at now.
func Heartbeats(ctx context.Context, clients *kube.Clients, now time.Time) (map[string]bool, error) {
	leases := &coordinationv1.LeaseList{}
	if err := clients.Client.List(ctx, leases, client.InNamespace(clients.Namespace), client.HasLabels{labels.RunID}); err != nil {
		return nil, fmt.Errorf("reading the runs' heartbeat Leases: %w", err)
	}
	out := map[string]bool{}
	for i := range leases.Items {
		l := &leases.Items[i]
		out[l.Labels[labels.RunID]] = heartbeat.Expired(l, now)
	}
	return out, nil
}
