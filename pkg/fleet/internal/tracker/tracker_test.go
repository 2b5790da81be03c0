package tracker_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// Another run's objects in the same namespace are invisible to a tracker.
func TestTrackerSeesOnlyItsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	other, err := resources.Template(ns, "run-other", "busybox:1.36", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	otherPool := resources.WarmPool(other, 1)
	for _, obj := range []client.Object{other, otherPool} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, "run-mine")
	if err != nil {
		t.Fatal(err)
	}
	// The cache is synced once Start returns, so a visible pool would be
	// found at once.
	if _, found, err := tr.WarmPool(ctx, otherPool.Name); err != nil || found {
		t.Fatalf("tracker of run-mine: WarmPool(%s of run-other) = found %v, %v", otherPool.Name, found, err)
	}
}

// A waiter on one pool is woken by its pool's events, not by another's.
func TestPoolChangedIsTargeted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, "run-keyed")
	if err != nil {
		t.Fatal(err)
	}
	create := func(image string) string {
		tmpl, err := resources.Template(ns, "run-keyed", image, resources.PodSpec{})
		if err != nil {
			t.Fatal(err)
		}
		// Zero replicas: only the pool objects change, no Pods come.
		pool := resources.WarmPool(tmpl, 0)
		if err := clients.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		for {
			changed := tr.Changed()
			if _, found, err := tr.WarmPool(ctx, pool.Name); err != nil || found {
				return pool.Name
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("pool %s never seen", pool.Name)
			}
		}
	}
	mine := resources.PoolName("run-keyed", "busybox:1.36")
	woken := tr.PoolChanged(mine)
	create("busybox:1.35")
	select {
	case <-woken:
		t.Fatal("another pool's event woke the waiter")
	default:
	}
	create("busybox:1.36")
	select {
	case <-woken:
	case <-ctx.Done():
		t.Fatal("the pool's own event did not wake the waiter")
	}
}

// Peak is the most live sandboxes the run held at once: a pool of 3 makes
// it 3, and it stays 3 once the pool and its Pods are gone. ReadySince
// says when the watch first saw each Pod Ready.
func TestPeakLiveSandboxes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, "run-peak")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := resources.Template(ns, "run-peak", "busybox:1.36", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.WarmPool(tmpl, 3)
	for _, obj := range []client.Object{tmpl, pool} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	waitLive := func(want int) {
		for {
			changed := tr.Changed()
			names := tr.LivePods()
			if len(names) == want {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("live sandboxes %v, want %d", names, want)
			}
		}
	}
	waitLive(3)
	if p := tr.Peak(); p != 3 {
		t.Errorf("Peak with 3 live sandboxes = %d", p)
	}
	before := time.Now()
	for _, name := range tr.LivePods() {
		for {
			changed := tr.Changed()
			if since, ok := tr.ReadySince(name); ok {
				if since.After(time.Now()) {
					t.Errorf("pod %s Ready since %s, in the future", name, since)
				}
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("pod %s never seen Ready (since %s)", name, before)
			}
		}
	}
	if err := clients.Client.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	waitLive(0)
	if p := tr.Peak(); p != 3 {
		t.Errorf("Peak after the pool went = %d, want 3", p)
	}
}

// Pulling sums the pulls annotated on the NodeImageCaches of the nodes
// where the run's Pods wait to be Ready, and not of other nodes.
func TestPulling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, "run-pulling")
	if err != nil {
		t.Fatal(err)
	}
	// Nodes no kubelet serves: a Pod bound to one stays Pending, waiting.
	node := func(name string, pulling nodecache.Pull) {
		cache := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{v1alpha1.PullingAnnotation: pulling.Annotation()}}}
		if err := clients.Client.Create(ctx, cache); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = clients.Client.Delete(context.Background(), cache) })
	}
	waitingNode, otherNode := strings.ToLower(t.Name())+"-waiting", strings.ToLower(t.Name())+"-other"
	node(waitingNode, nodecache.Pull{Done: 10 << 20, Size: 40 << 20, BytesPerSecond: 4 << 20})
	node(otherNode, nodecache.Pull{Done: 1 << 20, Size: 2 << 20, BytesPerSecond: 1 << 20})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "waiting", Namespace: ns, Labels: labels.ForRun("run-pulling")},
		Spec: corev1.PodSpec{NodeName: waitingNode, Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
	if err := clients.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	want := nodecache.Pull{Done: 10 << 20, Size: 40 << 20, BytesPerSecond: 4 << 20}
	for got := tr.Pulling(); got != want; got = tr.Pulling() {
		select {
		case <-ctx.Done():
			t.Fatalf("Pulling = %+v, want %+v, the waiting node's only", got, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Once the Pod is gone its node counts no more.
	if err := clients.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	for got := tr.Pulling(); got != (nodecache.Pull{}); got = tr.Pulling() {
		select {
		case <-ctx.Done():
			t.Fatalf("Pulling with no Pod waiting = %+v", got)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A caller that may not list Pods gets the API server's refusal at once,
// naming them, rather than a watch that waits for ever.
func TestStartWithoutTheRightToListPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-pods"}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-pods"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"extensions.agents.x-k8s.io"}, Resources: []string{"sandboxwarmpools", "sandboxclaims"}, Verbs: []string{"list", "watch"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}}}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, ns, sa.Name)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tracker.Start(ctx, cfg, ns, "run-mine")
	if err == nil || !strings.Contains(err.Error(), "listing Pods in namespace "+ns) || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("Start without list on Pods: %v, want a refusal naming them", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the refusal took %v", took)
	}
}

// A claim's Pod is its Sandbox's own: a Pod another tenant made that wears
// the run's label and names the Sandbox as its controller, by its very
// UID, is never taken for it (commands and files would go to it).
func TestClaimPodIsTheSandboxsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, "run-own")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := resources.Template(ns, "run-own", "busybox:1.36", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.WarmPool(tmpl, 1)
	claim := resources.Claim(pool, "t", nil)
	for _, obj := range []client.Object{tmpl, pool, claim} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	var own *corev1.Pod
	for own == nil {
		changed := tr.Changed()
		st, _, err := tr.Claim(ctx, claim.Name)
		if err != nil {
			t.Fatal(err)
		}
		if own = st.Pod; own != nil {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the claim's Pod never seen")
		}
	}
	owner := metav1.GetControllerOf(own)
	forged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "aaa-forged", Namespace: ns, Labels: own.Labels,
			OwnerReferences: []metav1.OwnerReference{*owner}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
	}
	if err := clients.Client.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	for !slices.Contains(tr.LivePods(), forged.Name) {
		changed := tr.Changed()
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the forged Pod never seen")
		}
	}
	for range 20 {
		st, _, err := tr.Claim(ctx, claim.Name)
		if err != nil || st.Pod == nil || st.Pod.UID != own.UID {
			got := "none"
			if st.Pod != nil {
				got = st.Pod.Name
			}
			t.Fatalf("the claim's Pod: %s (%v), want its own %s, not %s", got, err, own.Name, forged.Name)
		}
	}
}
