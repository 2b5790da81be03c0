package teardown_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/warm"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/sandbox"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/teardown"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// setup gives a test a namespace of its own, its clients, and two minutes.
func setup(t *testing.T) (context.Context, *kube.Clients) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	clients, err := cluster.Clients(cluster.NewNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, clients
}

// run warms two pools of 2 for runID and claims one sandbox.
func run(t *testing.T, ctx context.Context, clients *kube.Clients, runID string) (*tracker.Tracker, *sandbox.Handle) {
	t.Helper()
	tr, err := tracker.Start(ctx, clients.Config, clients.Namespace, runID)
	if err != nil {
		t.Fatal(err)
	}
	var pools []warm.Pool
	for _, img := range []string{"busybox:1.35", "busybox:1.36"} {
		tmpl, err := resources.Template(clients.Namespace, runID, img, resources.PodSpec{})
		if err != nil {
			t.Fatal(err)
		}
		pools = append(pools, warm.Pool{Template: tmpl, Pool: resources.WarmPool(tmpl, 2)})
	}
	if err := (&warm.Filler{Client: clients.Client, Tracker: tr}).Fill(ctx, pools); err != nil {
		t.Fatal(err)
	}
	claimer := &claim.Claimer{Client: clients.Client, Tracker: tr, Grace: claim.Grace{Backoff: time.Minute, Unschedulable: time.Minute}}
	h, err := claimer.Acquire(ctx, pools[0].Pool, "task-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr, h
}

// Two runs share a namespace; tearing one down removes all of it, Sandboxes
// included, and leaves the other exactly as it was.
func TestTeardownIsScopedToItsRun(t *testing.T) {
	ctx, clients := setup(t)
	a, _ := run(t, ctx, clients, "run-a")
	_, claimedB := run(t, ctx, clients, "run-b")
	before, err := teardown.Leftovers(ctx, clients.Client, clients.Namespace, "run-b")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.List(ctx, clients.Client, clients.Namespace, "")
	if err != nil {
		t.Fatal(err)
	}
	runs := inv.Runs().Items
	if len(runs) != 2 || runs[0].Name != "run-a" || runs[1].Name != "run-b" || runs[1].Status.Pools != 2 ||
		runs[1].Status.Claims != 1 || runs[1].CreationTimestamp.IsZero() {
		t.Errorf("Runs = %+v, want run-a and run-b, each with 2 pools and run-b with a claim", runs)
	}

	if err := teardown.Run(ctx, clients.Client, a, clients.Namespace, "run-a"); err != nil {
		t.Fatal(err)
	}
	if left, err := teardown.Leftovers(ctx, clients.Client, clients.Namespace, "run-a"); err != nil || len(left) > 0 {
		t.Errorf("run-a left %v (%v)", left, err)
	}
	after, err := teardown.Leftovers(ctx, clients.Client, clients.Namespace, "run-b")
	if err != nil {
		t.Fatal(err)
	}
	// run-b lost nothing. Its warm Pods are the controller's to churn (a
	// pool refills a claimed sandbox, and may trim a surplus), so of the
	// Pods only the claimed one must stay, and enough warm ones.
	pods := 0
	for _, obj := range before {
		if strings.HasPrefix(obj, "Pod/") {
			continue
		}
		if !slices.Contains(after, obj) {
			t.Errorf("tearing down run-a deleted %s of run-b", obj)
		}
	}
	for _, obj := range after {
		if strings.HasPrefix(obj, "Pod/") {
			pods++
		}
	}
	if !slices.Contains(after, "Pod/"+claimedB.Pod) || pods < 4 {
		t.Errorf("run-b's claimed pod %s or its warm pods are gone: %v", claimedB.Pod, after)
	}
	// The remaining Sandboxes, which carry no run label, all belong to
	// run-b's pools and claim.
	owners := map[string]bool{}
	for _, obj := range after {
		if kind, name, _ := strings.Cut(obj, "/"); kind == "SandboxWarmPool" || kind == "SandboxClaim" {
			owners[name] = true
		}
	}
	sandboxes := &sandboxv1beta1.SandboxList{}
	if err := clients.Client.List(ctx, sandboxes, client.InNamespace(clients.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, sb := range sandboxes.Items {
		ref := metav1.GetControllerOf(&sb)
		if ref == nil || !owners[ref.Name] {
			t.Errorf("sandbox %s (controller %v) is not run-b's", sb.Name, ref)
		}
	}
	// At least the claimed one and three warm ones (the claimed pool may
	// not have refilled yet).
	if len(sandboxes.Items) < 4 {
		t.Errorf("%d sandboxes remain, want run-b's", len(sandboxes.Items))
	}
}

// A run Pod whose Sandbox is gone, or that has no owner — as the
// controller may leave one after an API server restart — is deleted by
// teardown, which checks with the API server that nothing is left.
func TestTeardownDeletesStrayPods(t *testing.T) {
	ctx, clients := setup(t)
	tr, _ := run(t, ctx, clients, "stray")
	gone := metav1.OwnerReference{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox",
		Name: "deleted-sandbox", UID: types.UID(uuid.NewString()), Controller: ptr.To(true)}
	for name, owners := range map[string][]metav1.OwnerReference{"ownerless": nil, "owner-gone": {gone}} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: clients.Namespace, Labels: labels.ForRun("stray"), OwnerReferences: owners},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
		}
		if err := clients.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if err := teardown.Run(ctx, clients.Client, tr, clients.Namespace, "stray"); err != nil {
		t.Fatal(err)
	}
	if left, err := teardown.Leftovers(ctx, clients.Client, clients.Namespace, "stray"); err != nil || len(left) > 0 {
		t.Errorf("teardown left %v (%v)", left, err)
	}
}

// refuses stands in for an API server that is restarting: its first n
// requests find nothing listening. A real restart cannot be timed to fall
// on teardown's first request, which is the one that used to give up.
type refuses struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (r *refuses) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return r.next.RoundTrip(req)
}

// A run that ends while kube-apiserver restarts is torn down once it is
// back: teardown tries again while the server cannot be reached.
func TestTeardownWaitsOutAnAPIServerRestart(t *testing.T) {
	ctx, clients := setup(t)
	tr, _ := run(t, ctx, clients, "restart")
	cfg := cluster.RESTConfig()
	down := &refuses{}
	down.n.Store(5)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { down.next = rt; return down }
	restarting, err := kube.ForConfig(cfg, clients.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if err := teardown.Run(ctx, restarting.Client, tr, clients.Namespace, "restart"); err != nil {
		t.Fatalf("teardown with the first 5 requests refused = %v; want it done once the server answers", err)
	}
	if left, err := teardown.Leftovers(ctx, clients.Client, clients.Namespace, "restart"); err != nil || len(left) > 0 {
		t.Errorf("teardown left %v (%v)", left, err)
	}
}

// Teardown does not wait on the garbage collector: with
// kube-controller-manager stopped, a released claim's Sandbox and Pod,
// which only the collector would otherwise delete, go with the rest of
// the run.
func TestTeardownDoesNotWaitForTheGarbageCollector(t *testing.T) {
	ctx, clients := setup(t)
	tr, h := run(t, ctx, clients, "no-gc")
	kcm := cluster.Component("kube-controller-manager")
	if err := kcm.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kcm.Thaw(); err != nil {
			t.Error(err)
		}
	})
	released := &extensionsv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: h.Claim, Namespace: clients.Namespace}}
	if err := clients.Client.Delete(ctx, released); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := teardown.Run(tctx, clients.Client, tr, clients.Namespace, "no-gc"); err != nil {
		t.Fatalf("teardown with the garbage collector stopped = %v", err)
	}
	sandboxes := &sandboxv1beta1.SandboxList{}
	if err := clients.Client.List(ctx, sandboxes, client.InNamespace(clients.Namespace)); err != nil {
		t.Fatal(err)
	}
	left, err := teardown.Leftovers(ctx, clients.Client, clients.Namespace, "no-gc")
	if err != nil || len(left)+len(sandboxes.Items) > 0 {
		t.Errorf("teardown left %v and %d Sandboxes (%v)", left, len(sandboxes.Items), err)
	}
}

// When teardown returns, nothing of the run is left — no Sandbox either,
// though Sandboxes carry no run label — and nothing is made anew after:
// no Sandbox or Pod appears in the namespace in the seconds that follow.
func TestTeardownLeavesNothingToRecreate(t *testing.T) {
	ctx, clients := setup(t)
	tr, _ := run(t, ctx, clients, "fast")
	start := time.Now()
	if err := teardown.Run(ctx, clients.Client, tr, clients.Namespace, "fast"); err != nil {
		t.Fatal(err)
	}
	t.Logf("teardown took %s", time.Since(start).Round(time.Millisecond))
	sandboxes := &sandboxv1beta1.SandboxList{}
	if err := clients.Client.List(ctx, sandboxes, client.InNamespace(clients.Namespace)); err != nil {
		t.Fatal(err)
	}
	pods, err := clients.Kube.CoreV1().Pods(clients.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sandboxes.Items) > 0 || len(pods.Items) > 0 {
		t.Fatalf("teardown returned with %d Sandboxes and %d Pods in the namespace", len(sandboxes.Items), len(pods.Items))
	}
	watchCtx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	from := func(rv string) *client.ListOptions {
		return &client.ListOptions{Namespace: clients.Namespace, Raw: &metav1.ListOptions{ResourceVersion: rv}}
	}
	sandboxWatch, err := clients.Client.Watch(watchCtx, &sandboxv1beta1.SandboxList{}, from(sandboxes.ResourceVersion))
	if err != nil {
		t.Fatal(err)
	}
	defer sandboxWatch.Stop()
	podWatch, err := clients.Client.Watch(watchCtx, &corev1.PodList{}, from(pods.ResourceVersion))
	if err != nil {
		t.Fatal(err)
	}
	defer podWatch.Stop()
	events := []<-chan watch.Event{sandboxWatch.ResultChan(), podWatch.ResultChan()}
	for events[0] != nil || events[1] != nil {
		var ev watch.Event
		open := true
		select {
		case <-watchCtx.Done():
			return
		case ev, open = <-events[0]:
			if !open {
				events[0] = nil
			}
		case ev, open = <-events[1]:
			if !open {
				events[1] = nil
			}
		}
		if obj, ok := ev.Object.(client.Object); ok && ev.Type == watch.Added {
			t.Errorf("%T %s was made after teardown", obj, obj.GetName())
		}
	}
	t.Error("the watches ended before the 5 s were up")
}

// A run whose driver is gone is reaped by its id alone.
func TestReap(t *testing.T) {
	ctx, clients := setup(t)
	runCtx, stopRun := context.WithCancel(ctx)
	run(t, runCtx, clients, "abandoned")
	stopRun() // the driver is gone: its tracker stops, nothing is cleaned up
	if err := teardown.Reap(ctx, clients, "abandoned"); err != nil {
		t.Fatal(err)
	}
	if left, err := teardown.Leftovers(ctx, clients.Client, clients.Namespace, "abandoned"); err != nil || len(left) > 0 {
		t.Errorf("reaped run left %v (%v)", left, err)
	}
}

// A Pod that stays Terminating — as on a lost node, here held by a
// finalizer — ends a reap within StuckGrace of its deadline, naming it,
// rather than holding the reap for ever.
func TestReapReportsAPodStuckTerminating(t *testing.T) {
	ctx, clients := setup(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "on-a-lost-node", Namespace: clients.Namespace, Labels: labels.ForRun("stuck"),
			Finalizers: []string{"sandbox-fleet.io/test-hold"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
	}
	if err := clients.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`))
		if err := clients.Client.Patch(context.Background(), pod, patch); err != nil {
			t.Error(err)
		}
	})
	if err := clients.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := teardown.Reap(ctx, clients, "stuck")
	var stuck *teardown.StuckError
	if !errors.As(err, &stuck) || len(stuck.Objects) != 1 || stuck.Objects[0].GetName() != pod.Name ||
		!strings.Contains(err.Error(), "Pod "+clients.Namespace+"/on-a-lost-node") {
		t.Fatalf("reaping a run whose Pod stays Terminating: %v, want a StuckError naming it", err)
	}
	if took := time.Since(start); took > teardown.StuckGrace+20*time.Second {
		t.Errorf("the reap took %v", took)
	}
}
