package webhook

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// policyConfigurations writes the policies' entries (PolicyWebhooks) into
// the configurations named PoliciesSuffix.
type policyConfigurations struct {
	// Reader reads the configurations afresh before each write; Client
	// writes them.
	Reader client.Reader
	Client client.Client
	// Mutating and Validating name the shipped configurations.
	Mutating, Validating string
	SkipCompliant        bool
}

// isPendingEntry reports whether an entry of the configurations is one
// written for a pending change.
func isPendingEntry(name string) bool {
	prefix, _, _ := strings.Cut(name, ".")
	return strings.HasSuffix(prefix, "-pending")
}

// PodWebhookName is the shipped template entry for sandbox Pods.
const PodWebhookName = "sandbox-pods.sandbox-fleet.io"

// IsPodEntry reports whether an entry of the configurations named
// PoliciesSuffix stands for a policy for sandbox Pods (entryName of
// PodWebhookName), and whether it is a pending change's.
func IsPodEntry(name string) (ok, pending bool) {
	prefix, domain, _ := strings.Cut(PodWebhookName, ".")
	ok = strings.HasPrefix(name, prefix+"-") && strings.HasSuffix(name, "."+domain)
	return ok, ok && isPendingEntry(name)
}

// write sets the pending entries from the changes edit leaves of those
// recorded, and the policies' own entries from view — or, with
// pendingOnly, keeps those as they are (an admission has no view to
// write them from). It reports whether it changed the configurations.
func (c *policyConfigurations) write(ctx context.Context, view []v1alpha1.SandboxPolicy, pendingOnly bool, edit func([]Pending) []Pending) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		shippedM := &admissionregistrationv1.MutatingWebhookConfiguration{}
		shippedV := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		for _, get := range []struct {
			name string
			obj  client.Object
		}{{c.Mutating, shippedM}, {c.Validating, shippedV}, {c.Mutating + PoliciesSuffix, m}, {c.Validating + PoliciesSuffix, v}} {
			if err := c.Reader.Get(ctx, types.NamespacedName{Name: get.name}, get.obj); err != nil {
				return fmt.Errorf("reading %T %s: %w", get.obj, get.name, err)
			}
		}
		recorded, err := ReadPending(m)
		if err != nil {
			return err
		}
		pending := edit(slices.Clone(recorded))
		wantM, wantV := PolicyWebhooks(shippedM.Webhooks, shippedV.Webhooks, view, pending, c.SkipCompliant)
		if pendingOnly {
			wantM = append(wantM, kept(m.Webhooks, func(w admissionregistrationv1.MutatingWebhook) string { return w.Name })...)
			wantV = append(wantV, kept(v.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) string { return w.Name })...)
		}
		// The mutating configuration records the pending changes, so it
		// is written last: a retry finds them still to write.
		if !sameEntries(wantV, v.Webhooks) {
			out := v.DeepCopy()
			out.Webhooks = wantV
			if err := c.Client.Update(ctx, out); err != nil {
				return err
			}
			changed = true
		}
		out := m.DeepCopy()
		out.Webhooks = wantM
		writePending(out, pending)
		if reflect.DeepEqual(out.Annotations, m.Annotations) && sameEntries(wantM, m.Webhooks) {
			return nil
		}
		if err := c.Client.Update(ctx, out); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("writing the SandboxPolicies' webhook entries: %w", err)
	}
	return changed, nil
}

// sameEntries reports whether two lists of entries are equal, an empty
// list and none alike.
func sameEntries[W any](a, b []W) bool {
	return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b)
}

// kept are the entries of ws not written for a pending change.
func kept[W any](ws []W, name func(W) string) []W {
	var out []W
	for _, w := range ws {
		if !isPendingEntry(name(w)) {
			out = append(out, w)
		}
	}
	return out
}

// policySync is the elected replica's writer of the policies' entries:
// it follows the policies and the shipped configurations (their CA) and
// says in each policy's InForce condition when its generation is served.
type policySync struct {
	policyConfigurations
	Cache cache.Cache
}

// syncDelay gathers a burst of changes (a policy and the rotator's CA)
// into one write; syncEvery catches what an event missed.
const (
	syncDelay = 100 * time.Millisecond
	syncEvery = time.Minute
)

// Start implements manager.Runnable; it runs on the elected replica only.
func (s *policySync) Start(ctx context.Context) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("mutatingWebhookConfiguration", s.Mutating+PoliciesSuffix))
	return resync(ctx, s.Cache, []client.Object{&v1alpha1.SandboxPolicy{}, &admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}},
		"Keeping the SandboxPolicies' webhook entries as they are until it succeeds",
		func(ctx context.Context) (time.Duration, error) {
			pending, err := s.sync(ctx)
			if pending {
				// A change never stored shows no event: look again once
				// it may be found unstored.
				return storageLag, err
			}
			return 0, err
		})
}

// resync follows objs in c and calls sync after each change (a burst
// gathered over syncDelay), every syncEvery to catch what an event
// missed, and again as long after as sync asks — a second after it
// failed, logging failed with its error.
func resync(ctx context.Context, c cache.Cache, objs []client.Object, failed string, sync func(context.Context) (again time.Duration, err error)) error {
	poke := make(chan struct{}, 1)
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify(poke) },
		UpdateFunc: func(any, any) { notify(poke) },
		DeleteFunc: func(any) { notify(poke) },
	}
	for _, obj := range objs {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("following %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	if !c.WaitForCacheSync(ctx) {
		return nil
	}
	log := klog.FromContext(ctx)
	ticker := time.NewTicker(syncEvery)
	defer ticker.Stop()
	for {
		again, err := sync(ctx)
		if err != nil && ctx.Err() == nil {
			log.Error(err, failed)
			again = time.Second
		}
		if again > 0 {
			time.AfterFunc(again, func() { notify(poke) })
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

// sync writes the entries of the policies in the cache and of the changes
// still pending, and reports whether any are.
func (s *policySync) sync(ctx context.Context) (pending bool, err error) {
	policies := &v1alpha1.SandboxPolicyList{}
	if err := s.Cache.List(ctx, policies); err != nil {
		return false, err
	}
	view := policies.Items
	now := time.Now()
	changed, err := s.write(ctx, view, false, func(recorded []Pending) []Pending {
		left := slices.DeleteFunc(recorded, func(p Pending) bool { return p.Resolved(view) || s.unstored(ctx, p, now) })
		pending = len(left) > 0
		return left
	})
	if err != nil {
		return false, err
	}
	if changed {
		klog.FromContext(ctx).V(2).Info("Updated the SandboxPolicies' webhook entries", "policies", len(view))
	}
	for _, p := range view {
		if err := s.inForce(ctx, p); err != nil {
			return false, err
		}
	}
	return pending, nil
}

// unstored reports whether a pending change is one the API server never
// stored (its write failed after admission, or a later webhook refused
// it) or has since lost: past storageLag, one read of the API server
// finds no policy standing behind it. A change stored but not yet in this
// replica's cache stays pending, however long the cache lags, so its
// namespaces are never left without an entry; so does one whose read
// fails, until a later sync.
func (s *policySync) unstored(ctx context.Context, p Pending, now time.Time) bool {
	if !(entryRef{p.PolicyRef, p.Admitted}).mayBeUnbacked(now) {
		return false
	}
	live := &v1alpha1.SandboxPolicy{}
	return unbacked(p.PolicyRef, live, s.Reader.Get(ctx, types.NamespacedName{Name: p.Name}, live))
}

// inForce sets p's InForce condition for its generation, unless it is
// already.
func (s *policySync) inForce(ctx context.Context, p v1alpha1.SandboxPolicy) error {
	message := "the API server calls asrl-webhook for every sandbox Pod and SandboxTemplate in the namespaces it selects"
	if s.SkipCompliant {
		message = "the API server calls asrl-webhook for the sandbox Pods in the namespaces it selects that its CEL condition cannot pass as compliant, and for every SandboxTemplate there"
	}
	want := metav1.Condition{Type: v1alpha1.PolicyInForce, Status: metav1.ConditionTrue, ObservedGeneration: p.Generation, Reason: "WebhookEntriesWritten", Message: message}
	if c := meta.FindStatusCondition(p.Status.Conditions, want.Type); c != nil && c.Status == want.Status && c.ObservedGeneration == want.ObservedGeneration && c.Message == want.Message {
		return nil
	}
	return client.IgnoreNotFound(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fresh := &v1alpha1.SandboxPolicy{}
		if err := s.Reader.Get(ctx, types.NamespacedName{Name: p.Name}, fresh); err != nil {
			return err
		}
		if fresh.UID != p.UID || fresh.Generation != p.Generation {
			return nil
		}
		meta.SetStatusCondition(&fresh.Status.Conditions, want)
		return s.Client.Status().Update(ctx, fresh)
	}))
}
