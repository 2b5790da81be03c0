// Package tracker follows the Agent Sandbox objects of one run through
// shared informers — one watch per kind in the run's namespace, filtered by
// the run's label — and lets callers wait for states without polling and
// without a watch per object.
package tracker

import (
	"context"
	"fmt"
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
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

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event
}

// Start begins watching the warm pools and claims of run runID in namespace
// and returns once the first listing is in. It stops when ctx ends.
func Start(ctx context.Context, cfg *rest.Config, namespace, runID string) (*Tracker, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme:               kube.Scheme,
		DefaultNamespaces:    map[string]cache.Config{namespace: {}},
		DefaultLabelSelector: labels.RunSelector(runID),
	})
	if err != nil {
		return nil, fmt.Errorf("building the watch cache: %w", err)
	}
	t := &Tracker{cache: c, namespace: namespace, changed: make(chan struct{})}
	notify := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { t.notify() },
		UpdateFunc: func(any, any) { t.notify() },
		DeleteFunc: func(any) { t.notify() },
	}
	for _, obj := range []client.Object{&extensionsv1beta1.SandboxWarmPool{}, &extensionsv1beta1.SandboxClaim{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, fmt.Errorf("watching %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(notify); err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("listing the run's objects in namespace %s: %w", namespace, context.Cause(ctx))
	}
	return t, nil
}

func (t *Tracker) notify() {
	t.mu.Lock()
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
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

// WaitPoolReady waits until warm pool name has at least ready Ready sandboxes.
func (t *Tracker) WaitPoolReady(ctx context.Context, name string, ready int32) (*extensionsv1beta1.SandboxWarmPool, error) {
	pool := &extensionsv1beta1.SandboxWarmPool{}
	err := t.waitFor(ctx, fmt.Sprintf("warm pool %s/%s to have %d ready sandboxes", t.namespace, name, ready), func() (bool, error) {
		if err := t.get(ctx, name, pool); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return pool.Status.ReadyReplicas >= ready, nil
	})
	return pool, err
}

// WaitClaimReady waits until claim name is Ready: bound to a running sandbox
// that has a pod IP.
func (t *Tracker) WaitClaimReady(ctx context.Context, name string) (*extensionsv1beta1.SandboxClaim, error) {
	claim := &extensionsv1beta1.SandboxClaim{}
	err := t.waitFor(ctx, fmt.Sprintf("claim %s/%s to be Ready", t.namespace, name), func() (bool, error) {
		if err := t.get(ctx, name, claim); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return apimeta.IsStatusConditionTrue(claim.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady)) &&
			claim.Status.SandboxStatus.Name != "" && len(claim.Status.SandboxStatus.PodIPs) > 0, nil
	})
	return claim, err
}

func (t *Tracker) get(ctx context.Context, name string, obj client.Object) error {
	return t.cache.Get(ctx, client.ObjectKey{Namespace: t.namespace, Name: name}, obj)
}
