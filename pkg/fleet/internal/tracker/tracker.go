// Package tracker follows the Agent Sandbox objects of one run through
// shared informers — one watch per kind in the run's namespace, filtered by
// the run's label — and lets callers wait for states without polling and
// without a watch per object. Waiters are woken only by events about what
// they wait for, so a thousand claims in flight cost one wake-up per event,
// not a thousand.
//
// Objects returned by a Tracker are shared with its cache and must not be
// modified.
package tracker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// Tracker holds the run's objects as the API server last reported them.
type Tracker struct {
	cache     cache.Cache
	namespace string
	// reader reads from the API server what the cache does not hold.
	reader client.Reader

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event
	// keyed are closed and removed on an event about their key.
	keyed map[string]chan struct{}
	// claimOf maps a sandbox to the claim bound to it, so that events of
	// the sandbox's Pod wake the claim's waiters.
	claimOf map[string]string
	// live holds the run's Pods that are neither finished nor being
	// deleted; peak is the most it has held.
	live map[string]bool
	peak int
	// sandboxes are the identities of the run's Sandboxes, by name.
	sandboxes map[string]sandboxIdentity
	// readySince is when the watch first saw each Pod Ready.
	readySince map[string]time.Time
	// waiting maps the live Pods on a node but not Ready to their node.
	waiting map[string]string
	// caches holds the metadata of the cluster's NodeImageCaches, which
	// says what the nodes are pulling (nil when they cannot be read); it
	// is watched from the first call of Pulling, for only a progress
	// display asks.
	caches      toolscache.Store
	watchCaches func() toolscache.Store
	cachesOnce  sync.Once
}

// Start begins watching the warm pools, claims and Pods of run runID in namespace
// and returns once the first listing is in. It stops when ctx ends.
func Start(ctx context.Context, cfg *rest.Config, namespace, runID string) (*Tracker, error) {
	reader, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, err
	}
	if err := canList(ctx, reader, namespace, runID); err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{
		Scheme:               kube.Scheme,
		DefaultNamespaces:    map[string]cache.Config{namespace: {}},
		DefaultLabelSelector: labels.RunSelector(runID),
		// Readers never modify what they get, so reads need not copy; and
		// managed fields are never read.
		DefaultUnsafeDisableDeepCopy: new(true),
		DefaultTransform:             cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("building the watch cache: %w", err)
	}
	t := &Tracker{cache: c, reader: reader, namespace: namespace, changed: make(chan struct{}), sandboxes: map[string]sandboxIdentity{},
		keyed: map[string]chan struct{}{}, claimOf: map[string]string{}, live: map[string]bool{}, readySince: map[string]time.Time{},
		waiting: map[string]string{}}
	notify := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.notify(obj, false) },
		UpdateFunc: func(_, obj any) { t.notify(obj, false) },
		DeleteFunc: func(obj any) { t.notify(obj, true) },
	}
	// Pods are found by the Sandbox that controls them.
	// and by their warm pool.
	if err := c.IndexField(ctx, &corev1.Pod{}, poolIndex, func(o client.Object) []string {
		if pool := o.GetLabels()[labels.Pool]; pool != "" {
			return []string{pool}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("indexing pods: %w", err)
	}
	if err := c.IndexField(ctx, &corev1.Pod{}, sandboxIndex, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "Sandbox" {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("indexing pods: %w", err)
	}
	for _, obj := range []client.Object{&extensionsv1beta1.SandboxWarmPool{}, &extensionsv1beta1.SandboxClaim{}, &corev1.Pod{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, fmt.Errorf("watching %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(notify); err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !c.WaitForCacheSync(sctx) {
		return nil, fmt.Errorf("listing the run's objects in namespace %s: %w", namespace, context.Cause(sctx))
	}
	t.watchCaches = func() toolscache.Store { return watchPulling(ctx, cfg) }
	return t, nil
}

// syncTimeout bounds the wait for the watches' first lists: an informer
// that cannot list retries for ever, silently.
const syncTimeout = 2 * time.Minute

// canList lists each kind the tracker watches once, plainly: a caller
// without the right to gets the API server's refusal at once, naming the
// kind, rather than a watch that waits for ever.
func canList(ctx context.Context, c client.Client, namespace, runID string) error {
	for _, list := range []client.ObjectList{&extensionsv1beta1.SandboxWarmPoolList{}, &extensionsv1beta1.SandboxClaimList{}, &corev1.PodList{}} {
		err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: labels.RunSelector(runID)}, client.Limit(1))
		if err != nil {
			kind := strings.TrimSuffix(fmt.Sprintf("%T", list), "List")
			return fmt.Errorf("listing %ss in namespace %s: %w (a run lists and watches its warm pools, claims and Pods in its namespace)",
				kind[strings.LastIndex(kind, ".")+1:], namespace, err)
		}
	}
	return nil
}

// sandboxIndex indexes Pods by the name of their controlling Sandbox,
// poolIndex by their warm pool.
const (
	sandboxIndex = "sandbox"
	poolIndex    = "pool"
)

// Changed returns a channel closed at the next change to any object of the
// run, for callers that combine the tracker's state with timers of their own.
func (t *Tracker) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// ClaimState is what is known of a claim and of its sandbox's Pod.
type ClaimState struct {
	Claim *extensionsv1beta1.SandboxClaim
	// Pod is nil until the claim is bound to a sandbox whose Pod exists.
	Pod *corev1.Pod
}

// Claim returns the state of claim name; found is false when it does not exist.
func (t *Tracker) Claim(ctx context.Context, name string) (st ClaimState, found bool, err error) {
	claim := &extensionsv1beta1.SandboxClaim{}
	if err := t.get(ctx, name, claim); err != nil {
		return ClaimState{}, false, client.IgnoreNotFound(err)
	}
	st.Claim = claim
	if sandbox := claim.Status.SandboxStatus.Name; sandbox != "" {
		pod, err := t.podOf(ctx, sandbox)
		if err != nil {
			return ClaimState{}, false, err
		}
		st.Pod = pod
	}
	return st, true, nil
}

// podOf is the Pod of Sandbox name: the one the Agent Sandbox controller
// made for it — of the name the Sandbox gives its Pod (its own, or the
// adopted warm Pod's in its pod-name annotation) and controlled by it, by
// UID. Anyone who may create Pods in the namespace can make one that names
// the Sandbox as its controller and wears the run's label, but not one of
// the name the controller's Pod has.
func (t *Tracker) podOf(ctx context.Context, sandbox string) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := t.cache.List(ctx, pods, client.InNamespace(t.namespace), client.MatchingFields{sandboxIndex: sandbox}); err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, nil
	}
	for _, reread := range []bool{false, true} {
		id, err := t.sandboxID(ctx, sandbox, reread)
		if err != nil {
			return nil, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == id.uid && p.Name == id.pod {
				return p, nil
			}
		}
		// The Sandbox may since have adopted another Pod, or been made
		// again under its name: read it once more.
	}
	return nil, nil
}

// sandboxIdentity is what tells a Sandbox's own Pod: the Sandbox's UID and
// the name of its Pod.
type sandboxIdentity struct {
	uid types.UID
	pod string
}

// sandboxID is Sandbox name's identity, read from the API server once
// (again with reread) and kept: the run's Sandboxes are not watched.
func (t *Tracker) sandboxID(ctx context.Context, name string, reread bool) (sandboxIdentity, error) {
	t.mu.Lock()
	id, ok := t.sandboxes[name]
	t.mu.Unlock()
	if ok && !reread {
		return id, nil
	}
	sb := &sandboxv1beta1.Sandbox{}
	if err := t.reader.Get(ctx, client.ObjectKey{Namespace: t.namespace, Name: name}, sb); err != nil {
		return sandboxIdentity{}, client.IgnoreNotFound(err)
	}
	id = sandboxIdentity{uid: sb.UID, pod: sb.Name}
	if pod := sb.Annotations[sandboxv1beta1.SandboxPodNameAnnotation]; pod != "" {
		id.pod = pod
	}
	t.mu.Lock()
	t.sandboxes[name] = id
	t.mu.Unlock()
	return id, nil
}

// ClaimChanged returns a channel closed at the next change to claim or to
// the Pod of the sandbox bound to it.
func (t *Tracker) ClaimChanged(claim string) <-chan struct{} { return t.changedFor(claimKey(claim)) }

// PoolChanged returns a channel closed at the next change to warm pool
// pool or to any of its Pods.
func (t *Tracker) PoolChanged(pool string) <-chan struct{} { return t.changedFor(poolKey(pool)) }

func claimKey(name string) string { return "claim/" + name }
func poolKey(name string) string  { return "pool/" + name }

func (t *Tracker) changedFor(key string) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch, ok := t.keyed[key]
	if !ok {
		ch = make(chan struct{})
		t.keyed[key] = ch
	}
	return ch
}

// notify wakes the waiters for any change and those for the keys obj
// concerns.
func (t *Tracker) notify(obj any, deleted bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, deleted = tomb.Obj, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	close(t.changed)
	t.changed = make(chan struct{})
	var keys []string
	switch o := obj.(type) {
	case *extensionsv1beta1.SandboxClaim:
		keys = append(keys, claimKey(o.Name))
		if sandbox := o.Status.SandboxStatus.Name; sandbox != "" {
			if deleted {
				delete(t.claimOf, sandbox)
			} else {
				t.claimOf[sandbox] = o.Name
			}
		}
	case *extensionsv1beta1.SandboxWarmPool:
		keys = append(keys, poolKey(o.Name))
	case *corev1.Pod:
		if !deleted && live(o) {
			t.live[o.Name] = true
			t.peak = max(t.peak, len(t.live))
		} else {
			delete(t.live, o.Name)
		}
		if !deleted && live(o) && o.Spec.NodeName != "" && !kube.PodReady(o) {
			t.waiting[o.Name] = o.Spec.NodeName
		} else {
			delete(t.waiting, o.Name)
		}
		switch _, seen := t.readySince[o.Name]; {
		case deleted:
			delete(t.readySince, o.Name)
		case !seen && kube.PodReady(o):
			t.readySince[o.Name] = time.Now()
		}
		if pool := o.Labels[labels.Pool]; pool != "" {
			keys = append(keys, poolKey(pool))
		}
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "Sandbox" {
			if claim, ok := t.claimOf[ref.Name]; ok {
				keys = append(keys, claimKey(claim))
			}
		}
	}
	for _, k := range keys {
		if ch, ok := t.keyed[k]; ok {
			close(ch)
			delete(t.keyed, k)
		}
	}
}

// waitFor re-evaluates done after every event until it reports true, returns
// an error, or ctx ends.
func (t *Tracker) waitFor(ctx context.Context, what string, done func() (bool, error)) error {
	for {
		t.mu.Lock()
		changed := t.changed
		t.mu.Unlock()
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-changed:
		}
	}
}

// WarmPool returns the run's warm pool name; found is false when it does
// not exist.
func (t *Tracker) WarmPool(ctx context.Context, name string) (pool *extensionsv1beta1.SandboxWarmPool, found bool, err error) {
	pool = &extensionsv1beta1.SandboxWarmPool{}
	if err := t.get(ctx, name, pool); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	return pool, true, nil
}

// Ready reports whether the claim is bound to a Ready sandbox whose Pod,
// with its IP, is known.
func (s ClaimState) Ready() bool {
	return s.Claim != nil && s.Pod != nil &&
		apimeta.IsStatusConditionTrue(s.Claim.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady)) &&
		len(s.Claim.Status.SandboxStatus.PodIPs) > 0
}

// Pod returns the run's Pod name; found is false when it is gone.
func (t *Tracker) Pod(ctx context.Context, name string) (pod *corev1.Pod, found bool, err error) {
	pod = &corev1.Pod{}
	if err := t.get(ctx, name, pod); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	return pod, true, nil
}

// PoolPods lists the run's Pods of warm pool pool.
func (t *Tracker) PoolPods(ctx context.Context, pool string) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := t.cache.List(ctx, pods, client.InNamespace(t.namespace), client.MatchingFields{poolIndex: pool}); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// LivePods names the run's Pods that are neither finished nor being
// deleted: the sandboxes the run holds on the cluster right now, as the
// watch's events have told the tracker — the same view Peak and Changed
// follow, so a count read after a Changed wake-up agrees with Peak.
func (t *Tracker) LivePods() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.live))
}

// live reports whether pod is a sandbox the run holds: neither finished
// nor being deleted.
func live(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// ReadySince returns when the watch first saw Pod name Ready; ok is false
// when it has not.
func (t *Tracker) ReadySince(name string) (since time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	since, ok = t.readySince[name]
	return since, ok
}

// Peak returns the most live sandboxes (LivePods) the run has held at
// once, as the watch saw them.
func (t *Tracker) Peak() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peak
}

// WaitEmpty waits until the run has no claims, warm pools or Pods left.
func (t *Tracker) WaitEmpty(ctx context.Context) error {
	return t.waitFor(ctx, "the run's claims, warm pools and pods to be gone", func() (bool, error) {
		for _, list := range []client.ObjectList{&extensionsv1beta1.SandboxClaimList{}, &extensionsv1beta1.SandboxWarmPoolList{}, &corev1.PodList{}} {
			if err := t.cache.List(ctx, list, client.InNamespace(t.namespace)); err != nil {
				return false, err
			}
			if apimeta.LenList(list) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

func (t *Tracker) get(ctx context.Context, name string, obj client.Object) error {
	return t.cache.Get(ctx, client.ObjectKey{Namespace: t.namespace, Name: name}, obj)
}
