package claim_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/warm"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

func setup(t *testing.T, ctx context.Context, runID string) (*kube.Clients, *claim.Claimer) {
	t.Helper()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, runID)
	if err != nil {
		t.Fatal(err)
	}
	return clients, &claim.Claimer{Client: clients.Client, Tracker: tr, Grace: claim.Grace{Backoff: 2 * time.Second, Unschedulable: 2 * time.Second}}
}

// A template, a warm pool of 3 and a claim, made and followed by the
// project's own code on kwok nodes driven by the real Agent Sandbox
// controller: the claim is Ready with its sandbox name and pod IP, adopted
// from the pool, and released without a trace.
func TestAcquireAndRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const runID = "acquire"
	clients, claimer := setup(t, ctx, runID)
	tmpl, err := resources.Template(clients.Namespace, runID, "docker.io/library/busybox:1.36", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.WarmPool(tmpl, 3)
	if err := (&warm.Filler{Client: clients.Client, Tracker: claimer.Tracker}).Fill(ctx, []warm.Pool{{Template: tmpl, Pool: pool}}); err != nil {
		t.Fatal(err)
	}
	h, err := claimer.Acquire(ctx, pool, "task-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Claim == "" || h.Sandbox == "" || h.Node == "" || h.TaskID != "task-1" || h.Hostname != h.Sandbox ||
		h.Endpoint(8888) != h.Sandbox+"."+h.Namespace+":8888" {
		t.Errorf("handle %+v is incomplete", h)
	}
	if !h.Warm {
		t.Errorf("handle %+v: a claim on a filled pool did not find its sandbox warm", h)
	}
	if _, err := netip.ParseAddr(h.PodIP); err != nil {
		t.Errorf("handle pod IP %q: %v", h.PodIP, err)
	}
	// The Pod is the sandbox's, carries the run's labels, and was warm
	// before the claim: adopted, not cold-started.
	pod := &corev1.Pod{}
	if err := clients.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Pod}, pod); err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.Name != h.Sandbox || pod.Labels[labels.RunID] != runID || pod.Status.PodIP != h.PodIP {
		t.Errorf("pod %s: controller %v labels %v IP %s; want sandbox %s, run %s, IP %s", pod.Name, ref, pod.Labels, pod.Status.PodIP, h.Sandbox, runID, h.PodIP)
	}
	// The controller records on the Sandbox whether it was warm.
	sandbox := &sandboxv1beta1.Sandbox{}
	if err := clients.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Sandbox}, sandbox); err != nil {
		t.Fatal(err)
	}
	if got := sandbox.Labels["agents.x-k8s.io/launch-type"]; got != "warm" {
		t.Errorf("sandbox %s launch type %q: the claim did not adopt a warm sandbox", sandbox.Name, got)
	}

	// The sandbox is alive until its Pod goes, then reported lost.
	if err := claimer.Alive(ctx, h); err != nil {
		t.Errorf("Alive(%s) = %v right after the claim", h.Pod, err)
	}
	if err := clients.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	var lost *verdict.LostError
	for {
		changed := claimer.Tracker.Changed()
		if err := claimer.Alive(ctx, h); errors.As(err, &lost) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("pod %s deleted but its sandbox never reported lost", h.Pod)
		}
	}
	// The Sandbox controller makes a new Pod of the same name; the claimed
	// sandbox, and whatever ran in it, stays lost.
	for {
		changed := claimer.Tracker.Changed()
		p, found, err := claimer.Tracker.Pod(ctx, h.Pod)
		if err != nil {
			t.Fatal(err)
		}
		if found && p.UID != h.PodUID && p.DeletionTimestamp == nil {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the Sandbox controller made no new pod %s", h.Pod)
		}
	}
	if err := claimer.Alive(ctx, h); !errors.As(err, &lost) {
		t.Errorf("Alive = %v once a new pod of the name replaced the claimed one; want it lost", err)
	}

	if err := claimer.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	err = clients.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Claim}, &extensionsv1beta1.SandboxClaim{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("claim %s after release: %v", h.Claim, err)
	}
}

// unschedulablePool makes a pool of run runID whose Pods no node takes. It
// never becomes Ready, so it is created by hand, not filled.
func unschedulablePool(t *testing.T, ctx context.Context, clients *kube.Clients, runID string) *extensionsv1beta1.SandboxWarmPool {
	t.Helper()
	tmpl, err := resources.Template(clients.Namespace, runID, "busybox:1.36", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.PodTemplate.Spec.NodeSelector = map[string]string{"no-such-label": "anywhere"}
	pool := resources.WarmPool(tmpl, 1)
	for _, obj := range []client.Object{tmpl, pool} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

// A Pod that cannot be scheduled may become schedulable, so the claim waits
// out the grace period, then gives up and deletes itself. That the claim
// is bound to its sandbox is told once, as soon as it is, while the Pod
// still waits.
func TestUnschedulableFailsAfterGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, claimer := setup(t, ctx, "unschedulable")
	pool := unschedulablePool(t, ctx, clients, "unschedulable")

	start := time.Now()
	var boundAt []time.Duration
	_, err := claimer.Acquire(ctx, pool, "task-1", nil, func() { boundAt = append(boundAt, time.Since(start)) })
	var claimErr *verdict.StartError
	if !errors.As(err, &claimErr) || claimErr.Reason != "Unschedulable" || claimErr.Terminal {
		t.Fatalf("Acquire = %v; want an Unschedulable claim error", err)
	}
	if took := time.Since(start); took < claimer.Grace.Unschedulable {
		t.Errorf("gave up after %s, before the %s grace", took, claimer.Grace.Unschedulable)
	}
	if len(boundAt) != 1 || boundAt[0] >= claimer.Grace.Unschedulable {
		t.Errorf("the claim was told bound at %v, want once, before the %s grace", boundAt, claimer.Grace.Unschedulable)
	}
	claims := &extensionsv1beta1.SandboxClaimList{}
	if err := clients.Client.List(ctx, claims, client.InNamespace(clients.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil {
			t.Errorf("claim %s was left behind", c.Name)
		}
	}
}

// A claim someone else deletes while its task waits ends the wait at once,
// instead of holding the task until its timeout.
func TestClaimDeletedByAnotherClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, claimer := setup(t, ctx, "vanished")
	claimer.Grace = claim.Grace{Backoff: time.Hour, Unschedulable: time.Hour}
	pool := unschedulablePool(t, ctx, clients, "vanished")
	go func() {
		// Another client deletes every claim of the namespace once one is there.
		for ctx.Err() == nil {
			claims := &extensionsv1beta1.SandboxClaimList{}
			if err := clients.Client.List(ctx, claims, client.InNamespace(clients.Namespace)); err == nil && len(claims.Items) > 0 {
				for i := range claims.Items {
					_ = clients.Client.Delete(ctx, &claims.Items[i])
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := claimer.Acquire(ctx, pool, "task-1", nil, nil)
	var vanished *verdict.VanishedError
	if !errors.As(err, &vanished) {
		t.Fatalf("Acquire = %v; want a VanishedError", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("noticed the deletion after %s", took)
	}
}

// losesAnswers sends every request on, but loses the answer to the first
// n creates of a claim, as a connection dropped by a stalled API server
// does: the claim is made, and the client is told the connection was lost.
// It stands in for the network because a drop must fall exactly between
// the write and its answer for the test to say anything.
type losesAnswers struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (l *losesAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/sandboxclaims") || l.n.Add(-1) < 0 {
		return resp, err
	}
	resp.Body.Close()
	return nil, errors.New("http2: client connection lost")
}

// A claim whose create landed but whose answer was lost is recognised on
// the retry: the task gets its sandbox, and the namespace holds one claim
// for it, not two.
func TestClaimCreateRetriedAfterALostAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const runID = "lost-answer"
	clients, claimer := setup(t, ctx, runID)
	cfg := cluster.RESTConfig()
	drop := &losesAnswers{}
	drop.n.Store(2)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { drop.next = rt; return drop }
	lossy, err := kube.ForConfig(cfg, clients.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	claimer.Client = lossy.Client

	tmpl, err := resources.Template(clients.Namespace, runID, "docker.io/library/busybox:1.36", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.WarmPool(tmpl, 1)
	if err := (&warm.Filler{Client: clients.Client, Tracker: claimer.Tracker}).Fill(ctx, []warm.Pool{{Template: tmpl, Pool: pool}}); err != nil {
		t.Fatal(err)
	}
	h, err := claimer.Acquire(ctx, pool, "task-1", nil, nil)
	if err != nil {
		t.Fatalf("Acquire with the first two answers lost = %v; want the claim it made", err)
	}
	claims := &extensionsv1beta1.SandboxClaimList{}
	if err := clients.Client.List(ctx, claims, client.InNamespace(clients.Namespace)); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 1 || claims.Items[0].Name != h.Claim {
		t.Errorf("%d claims in the namespace, want only %s", len(claims.Items), h.Claim)
	}
	if err := claimer.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
}
