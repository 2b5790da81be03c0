// Package teardown removes everything a run created in a namespace, and
// nothing else: every deletion is selected by the run's label.
package teardown

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/heartbeat"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/sessionstate"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/prepull"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// Watch watches a run's objects: WaitEmpty returns once it sees none of
// them left, or when ctx ends. The engine's own watch of the run is one;
// Reap starts one of its own.
type Watch interface {
	WaitEmpty(ctx context.Context) error
}

// Run tears run runID down as fast as the API server and the controller
// allow, and returns once the API server — not only the watch cache —
// shows none of its claims, warm pools, templates, Sandboxes or Pods left.
//
// Every object is deleted by itself, in parallel: a collection delete
// is served one object after another. What makes Sandboxes goes first,
// the claims and pools, so that nothing new is made for the run. Then the
// templates and the run's Sandboxes — those the claims and pools
// controlled, and those controlling a run Pod, as a released claim's
// Sandbox does while it waits in the garbage collector's queue — each
// followed at once by its Pods. The garbage collector would take them one
// rate-limited queue hop after their owner: seconds for a few dozen.
//
// A Pod is deleted only once its Sandbox is gone, so the controller is
// not raced into making it anew: it makes no Pod for a Sandbox it has seen
// deleted, and a Pod's deletion is graceful, so its last event comes a
// node round trip after the Sandbox's. A Pod made anyway has no owner left
// and is deleted on the next look.
//
// Each look at the API server deletes what it still finds, so a Pod left
// behind by the controller after an API server restart, which nothing
// else would delete, goes too. Every step is safe to repeat, and the whole
// is tried again while the API server cannot be reached (a restart at the
// end of a run), until ctx ends.
func Run(ctx context.Context, c client.Client, tr Watch, namespace, runID string) error {
	owners := map[types.UID]bool{}
	for {
		err := tearDown(ctx, c, tr, namespace, runID, owners)
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

// tearDown looks at the API server and deletes what is left of the run,
// until nothing is. owners gathers the UIDs of the run's claims and pools
// seen, whose Sandboxes are the run's after their owners are gone.
func tearDown(ctx context.Context, c client.Client, tr Watch, namespace, runID string, owners map[types.UID]bool) error {
	trust := firstRecheck
	for {
		looked := time.Now()
		left, err := look(ctx, c, namespace, runID, owners)
		if err != nil {
			return fmt.Errorf("run %s: %w", runID, err)
		}
		if left.empty() {
			return nil
		}
		if stuck := left.stuck(time.Now()); len(stuck) > 0 {
			return &StuckError{Objects: stuck}
		}
		if err := left.delete(ctx, c); err != nil {
			return fmt.Errorf("run %s: %w", runID, err)
		}
		// The watch cache says when to look again; the API server says
		// whether it is so. A watch that missed an event, around an API
		// server restart, must not end a teardown early nor hold it
		// forever. Sandboxes carry no run label, so the watch does not
		// see them, nor those a pool made as it was being deleted: look
		// again soon, then less and less often.
		waitCtx, cancel := context.WithTimeout(ctx, trust)
		err = tr.WaitEmpty(waitCtx)
		cancel()
		trust = min(2*trust, verifyEvery)
		if ctx.Err() != nil {
			return fmt.Errorf("run %s: %w", runID, errors.Join(err, context.Cause(ctx)))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s: %w", runID, context.Cause(ctx))
		case <-time.After(time.Until(looked.Add(recheckAfter))):
		}
	}
}

const (
	// parallelDeletes bounds the deletions in flight, well within the
	// client's burst (kube.Limits).
	parallelDeletes = 32
	// firstRecheck is how long teardown trusts its watch, after its first
	// deletions, before it asks the API server again what is left; the
	// trust doubles up to verifyEvery.
	firstRecheck = 500 * time.Millisecond
	verifyEvery  = 5 * time.Second
	// recheckAfter spaces the looks at the API server.
	recheckAfter = 250 * time.Millisecond
)

// StuckGrace is how long past its deletion deadline (its deletion
// timestamp, which holds its grace period) a Pod may take to go before
// teardown stops waiting for it: a Pod on a node that was lost stays
// Terminating until its node is deleted or the Pod is force-deleted,
// which is not teardown's to decide (its containers may still run, on
// the other side of a partition).
const StuckGrace = 30 * time.Second

// StuckError is a teardown that ended with nothing left of the run but
// objects that are not going: being deleted, long past their deadline.
type StuckError struct {
	Objects []client.Object
}

func (e *StuckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d objects stay being deleted, past their grace period by more than %v:", len(e.Objects), StuckGrace)
	for _, o := range e.Objects {
		kind := fmt.Sprintf("%T", o)
		kind = kind[strings.LastIndex(kind, ".")+1:]
		where := ""
		if p, ok := o.(*corev1.Pod); ok {
			where = ", node " + cmp.Or(p.Spec.NodeName, "none")
		}
		fmt.Fprintf(&b, " %s %s/%s (deleting since %s%s)", kind, o.GetNamespace(), o.GetName(), o.GetDeletionTimestamp().Format(time.RFC3339), where)
	}
	b.WriteString("; a Pod's node may be lost: once it is gone for good, delete the node (kubectl delete node) or force-delete its Pods (kubectl delete pod --force --grace-period=0)")
	return b.String()
}

// stuck lists what is left when all of it is being deleted more than
// StuckGrace past its deadline at now; nil while anything may still go.
func (r *remains) stuck(now time.Time) []client.Object {
	var all []client.Object
	all = append(all, r.makers...)
	all = append(all, r.templates...)
	for _, sb := range r.sandboxes {
		all = append(all, sb)
	}
	for _, ps := range r.pods {
		for _, p := range ps {
			all = append(all, p)
		}
	}
	for _, p := range r.strays {
		all = append(all, p)
	}
	for _, o := range all {
		if at := o.GetDeletionTimestamp(); at == nil || now.Before(at.Add(StuckGrace)) {
			return nil
		}
	}
	slices.SortFunc(all, func(a, b client.Object) int { return strings.Compare(a.GetName(), b.GetName()) })
	return all
}

// remains is what one look found of a run.
type remains struct {
	makers    []client.Object // claims and warm pools
	templates []client.Object
	sandboxes []*sandboxv1beta1.Sandbox
	// pods are the run's Pods by the UID of the Sandbox, still there,
	// that controls them; strays those whose Sandbox is gone, or that
	// have none.
	pods   map[types.UID][]*corev1.Pod
	strays []*corev1.Pod
}

func (r *remains) empty() bool {
	return len(r.makers)+len(r.templates)+len(r.sandboxes)+len(r.pods)+len(r.strays) == 0
}

// look reads what is left of run runID from the API server. The Sandboxes
// are listed after the Pods, so a Pod whose Sandbox is not in the list
// has none.
func look(ctx context.Context, c client.Client, namespace, runID string, owners map[types.UID]bool) (*remains, error) {
	inv, err := inventory.List(ctx, c, namespace, runID)
	if err != nil {
		return nil, err
	}
	all := &sandboxv1beta1.SandboxList{}
	if err := c.List(ctx, all, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the Sandboxes in %s: %w", namespace, err)
	}
	r := &remains{pods: map[types.UID][]*corev1.Pod{}}
	for i := range inv.Claims {
		owners[inv.Claims[i].UID] = true
		r.makers = append(r.makers, &inv.Claims[i])
	}
	for i := range inv.Pools {
		owners[inv.Pools[i].UID] = true
		r.makers = append(r.makers, &inv.Pools[i])
	}
	for i := range inv.Templates {
		r.templates = append(r.templates, &inv.Templates[i])
	}
	for i := range inv.Pods {
		pod := &inv.Pods[i]
		if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "Sandbox" {
			r.pods[ref.UID] = append(r.pods[ref.UID], pod)
		} else {
			r.strays = append(r.strays, pod)
		}
	}
	there := map[types.UID]bool{}
	for i := range all.Items {
		sb := &all.Items[i]
		_, controlsPods := r.pods[sb.UID]
		if ref := metav1.GetControllerOf(sb); controlsPods || ref != nil && owners[ref.UID] {
			r.sandboxes = append(r.sandboxes, sb)
			there[sb.UID] = true
		}
	}
	for uid, pods := range r.pods {
		if !there[uid] {
			r.strays = append(r.strays, pods...)
			delete(r.pods, uid)
		}
	}
	return r, nil
}

// delete deletes what r holds, each object the very one found (a UID
// precondition): the claims and pools first, then in parallel the
// templates, each Sandbox followed by its Pods, and the strays.
func (r *remains) delete(ctx context.Context, c client.Client) error {
	var makers errgroup.Group
	makers.SetLimit(parallelDeletes)
	for _, obj := range r.makers {
		makers.Go(func() error { _, err := deleteObject(ctx, c, obj); return err })
	}
	if err := makers.Wait(); err != nil {
		return err
	}
	var rest errgroup.Group
	rest.SetLimit(parallelDeletes)
	for _, obj := range r.templates {
		rest.Go(func() error { _, err := deleteObject(ctx, c, obj); return err })
	}
	for _, sb := range r.sandboxes {
		rest.Go(func() error {
			gone, err := deleteObject(ctx, c, sb)
			if !gone {
				return err
			}
			return deletePods(ctx, c, r.pods[sb.UID])
		})
	}
	for _, pod := range r.strays {
		rest.Go(func() error { return deletePods(ctx, c, []*corev1.Pod{pod}) })
	}
	return rest.Wait()
}

// deleteObject deletes obj, the very object found, and reports whether it
// is gone. One gone already is fine: none of that name, or another of
// that name (a Conflict). So is one this user may not delete: the garbage
// collector takes it, only later.
func deleteObject(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	uid := obj.GetUID()
	err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return true, nil
	case apierrors.IsForbidden(err):
		return false, nil
	default:
		kind := fmt.Sprintf("%T", obj)
		if gvk, gerr := c.GroupVersionKindFor(obj); gerr == nil {
			kind = gvk.Kind
		}
		return false, fmt.Errorf("deleting %s %s: %w", kind, obj.GetName(), err)
	}
}

// deletePods deletes pods, whose Sandbox is gone, but those being
// deleted already. One this user may not delete is left to the garbage
// collector, unless it has no owner for the collector to go by: that one
// is a leak, and the error says how to fix it.
func deletePods(ctx context.Context, c client.Client, pods []*corev1.Pod) error {
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		gone, err := deleteObject(ctx, c, pod)
		switch {
		case err != nil:
			return err
		case !gone && metav1.GetControllerOf(pod) == nil:
			return fmt.Errorf("Pod %s has no Sandbox left to delete it, and this user may not delete pods; to fix: delete it (kubectl -n %s delete pod %s), or allow this user to delete pods", pod.Name, pod.Namespace, pod.Name)
		}
	}
	return nil
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
	jobs, err := prepull.OfRun(ctx, c, namespace, runID)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		left = append(left, "PrepullJob/"+j)
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
	if _, err := prepull.DeleteOfRun(ctx, clients.Client, clients.Namespace, runID); err != nil {
		return err
	}
	// A session's state goes with it: nothing is left to resume.
	state := &sessionstate.Store{Client: clients.Client, Namespace: clients.Namespace, RunID: runID}
	if err := state.Delete(ctx); err != nil {
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
