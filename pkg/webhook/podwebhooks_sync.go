package webhook

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// podWebhookSync keeps the sandbox Pod webhook entries of the
// MutatingWebhookConfiguration Name as SyncPodWebhooks makes them, as
// namespaces, policies and the configuration change.
type podWebhookSync struct {
	Cache cache.Cache
	// Reader reads the configuration afresh before each write; Client
	// writes it.
	Reader client.Reader
	Client client.Client
	Name   string
}

// syncDelay gathers a burst of changes (a namespace and its policy, the
// rotator's CA) into one write; syncEvery catches what an event missed.
const (
	syncDelay = 100 * time.Millisecond
	syncEvery = time.Minute
)

// Start implements manager.Runnable.
func (s *podWebhookSync) Start(ctx context.Context) error {
	poke := make(chan struct{}, 1)
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify(poke) },
		UpdateFunc: func(any, any) { notify(poke) },
		DeleteFunc: func(any) { notify(poke) },
	}
	for _, obj := range []client.Object{&corev1.Namespace{}, &v1alpha1.SandboxPolicy{}, &admissionregistrationv1.MutatingWebhookConfiguration{}} {
		inf, err := s.Cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("following %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	if !s.Cache.WaitForCacheSync(ctx) {
		return nil
	}
	log := klog.FromContext(ctx).WithValues("mutatingWebhookConfiguration", s.Name)
	ticker := time.NewTicker(syncEvery)
	defer ticker.Stop()
	for {
		if err := s.sync(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Keeping the sandbox Pod webhook's conditions; every sandbox Pod may reach the webhook until it succeeds")
			time.AfterFunc(time.Second, func() { notify(poke) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-poke:
			time.Sleep(syncDelay)
		case <-ticker.C:
		}
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (s *podWebhookSync) sync(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := s.Reader.Get(ctx, types.NamespacedName{Name: s.Name}, cfg); err != nil {
			return client.IgnoreNotFound(err)
		}
		namespaces := &corev1.NamespaceList{}
		if err := s.Cache.List(ctx, namespaces, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		policies := &v1alpha1.SandboxPolicyList{}
		if err := s.Cache.List(ctx, policies, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		out, changed, err := SyncPodWebhooks(cfg, namespaces.Items, policies.Items)
		if err != nil || !changed {
			return err
		}
		if err := s.Client.Update(ctx, out); err != nil {
			return fmt.Errorf("updating MutatingWebhookConfiguration %s: %w", s.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Updated the sandbox Pod webhook's entries", "mutatingWebhookConfiguration", s.Name, "entries", len(out.Webhooks))
		return nil
	})
}
