package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// ValidatePoliciesPath is where PolicyAdmitter is served.
const ValidatePoliciesPath = "/validate-sandbox-policies"

// PolicyAdmitter puts a SandboxPolicy's creation or change in force before
// it is stored: it writes the policy's pending entries into the
// configurations named PoliciesSuffix and refuses the change when it
// cannot, so no sandbox Pod the policy selects is admitted unchecked
// while the elected replica catches up.
type PolicyAdmitter struct {
	configurations *policyConfigurations
}

// Handle implements admission.Handler.
func (a *PolicyAdmitter) Handle(ctx context.Context, req admission.Request) admission.Response {
	return timed("SandboxPolicy", func() (admission.Response, string) { return a.handle(ctx, req) })
}

func (a *PolicyAdmitter) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if resp, result, ok := carries(req, "SandboxPolicy"); !ok {
		return resp, result
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed(""), resultAllowed
	}
	p := &v1alpha1.SandboxPolicy{}
	if err := json.Unmarshal(req.Object.Raw, p); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the SandboxPolicy: %w", err)), resultErrored
	}
	if _, err := metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector); err != nil {
		return admission.Denied(fmt.Sprintf("SandboxPolicy %q: spec.namespaceSelector: %v", p.Name, err)), resultDenied
	}
	if err := policy.CheckNetwork(p.Spec.Network); err != nil {
		return admission.Denied(fmt.Sprintf("SandboxPolicy %q: %v", p.Name, err)), resultDenied
	}
	if req.Operation == admissionv1.Update {
		old := &v1alpha1.SandboxPolicy{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err == nil && old.Generation == p.Generation {
			return admission.Allowed("the policy's spec is unchanged"), resultAllowed
		}
	}
	if req.DryRun != nil && *req.DryRun {
		return admission.Allowed("a dry run puts nothing in force"), resultAllowed
	}
	if p.UID == "" {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("SandboxPolicy %q has no UID: the API server assigns one before validating admission", p.Name)), resultErrored
	}
	admitted := Pending{PolicyRef: refOf(*p), Admitted: time.Now()}
	full := false
	_, err := a.configurations.write(ctx, nil, true, func(recorded []Pending) []Pending {
		var out []Pending
		out, full = withPending(recorded, admitted)
		return out
	})
	if full {
		return admission.Errored(http.StatusTooManyRequests, fmt.Errorf("SandboxPolicy %q: %d other policy changes are being put in force; try again in a moment", p.Name, MaxPending)), resultErrored
	}
	if err != nil {
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("SandboxPolicy %q cannot be put in force, so it is not stored: %w; try again", p.Name, err)), resultErrored
	}
	return admission.Allowed("in force: the API server calls asrl-webhook for the namespaces it selects"), resultAllowed
}

// withPending is recorded with admitted in place of any earlier change of
// its policy, or recorded as it is and full when MaxPending other changes
// are pending.
func withPending(recorded []Pending, admitted Pending) (out []Pending, full bool) {
	for _, r := range recorded {
		if r.Name != admitted.Name {
			out = append(out, r)
		}
	}
	if len(out) >= MaxPending {
		return recorded, true
	}
	return append(out, admitted), false
}

// MaxPending bounds the policy changes pending at once, each an entry in
// the webhook configuration: the elected replica resolves them within
// moments, and the configuration must stay small enough to be written.
const MaxPending = 16

// freshWait bounds how long an admission waits for the policy whose
// entry called it to reach this replica's cache: the moments between a
// policy's storing and its watch event.
const freshWait = 2 * time.Second

// policyView serves admissions the policies and namespaces they are
// decided on, from the manager's cache; the API server is read only to
// tell a lagging cache from an entry no policy stands behind.
type policyView struct {
	Reader client.Reader
	// Live reads the API server, once, for a policy an entry stands for
	// that the cache does not show in time (fresh).
	Live client.Reader

	mu sync.Mutex
	// deleted are the UIDs of policies deleted while the webhook ran, so
	// a call by a deleted policy's entry (until the elected replica
	// removes it) does not wait for the policy.
	deleted map[types.UID]bool
}

// OnDelete implements the delete handler of the policies' informer.
func (v *policyView) OnDelete(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if p, ok := obj.(*v1alpha1.SandboxPolicy); ok {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.deleted == nil {
			v.deleted = map[types.UID]bool{}
		}
		v.deleted[p.UID] = true
	}
}

type policyRefKey struct{}

// entryRef is the policy an entry's call stands for, and when it is a
// pending change's, when that was admitted.
type entryRef struct {
	PolicyRef
	admitted time.Time
}

// withPolicyRef is an admission.Webhook's WithContextFunc for the
// policies' entries, whose paths extend base (PolicyWebhooks): it carries
// the policy an entry's call stands for.
func withPolicyRef(base string) func(context.Context, *http.Request) context.Context {
	return func(ctx context.Context, r *http.Request) context.Context {
		if ref, admitted, ok := ParsePolicyPath(strings.TrimPrefix(r.URL.Path, base)); ok {
			return context.WithValue(ctx, policyRefKey{}, entryRef{ref, admitted})
		}
		return ctx
	}
}

// storageLag is how long after its admission a policy change may still
// not be stored: the API server stores an object moments after its
// validating webhooks allow it.
const storageLag = 10 * time.Second

// mayBeUnbacked reports whether no policy may stand behind the entry:
// a policy's own entry is written once its policy is stored, a pending
// change's only storageLag after its admission.
func (e entryRef) mayBeUnbacked(now time.Time) bool {
	return e.admitted.IsZero() || now.Sub(e.admitted) > storageLag
}

// unbacked reports whether the API server's answer to a read of ref's
// name (live, err) shows that no policy stands behind ref's entry: the
// name is not found, is another policy's, or is still at an older
// generation (the change was refused after this webhook allowed it).
func unbacked(ref PolicyRef, live *v1alpha1.SandboxPolicy, err error) bool {
	return apierrors.IsNotFound(err) || err == nil && (live.UID != ref.UID || live.Generation < ref.Generation)
}

// fresh waits until the cache holds the policy whose entry made the call
// at its generation or a newer one, or knows it deleted. When it does not
// in time, one read of the API server tells a cache that lags from an
// entry no policy stands behind — a pending change admitted longer than
// storageLag ago and never stored (its write failed, or the review was
// made up), or a policy's own entry after its deletion: that entry is
// then ignored, rather than every sandbox Pod it selects refused.
func (v *policyView) fresh(ctx context.Context) error {
	e, ok := ctx.Value(policyRefKey{}).(entryRef)
	if !ok {
		return nil
	}
	ref := e.PolicyRef
	found, err := await(ctx, func() (bool, error) {
		p := &v1alpha1.SandboxPolicy{}
		err := v.Reader.Get(ctx, types.NamespacedName{Name: ref.Name}, p)
		switch {
		case err == nil:
			return p.UID != ref.UID || p.Generation >= ref.Generation, nil
		case !apierrors.IsNotFound(err):
			return false, err
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.deleted[ref.UID], nil
	})
	if err == nil && !found {
		if v.Live != nil && e.mayBeUnbacked(time.Now()) {
			p := &v1alpha1.SandboxPolicy{}
			if unbacked(ref, p, v.Live.Get(ctx, types.NamespacedName{Name: ref.Name}, p)) {
				return nil
			}
		}
		err = fmt.Errorf("SandboxPolicy %q generation %d is not in this webhook replica's cache yet; retry", ref.Name, ref.Generation)
	}
	return err
}

// admissionBudget bounds all of one admission's waits for the cache
// together — the policy, the namespace, the Pod's Sandbox and its owner,
// each up to freshWait — within the webhook configurations' 5 s timeout,
// so the API server hears the webhook's answer, not its own timeout.
const admissionBudget = 4 * time.Second

// withBudget is ctx bounded by admissionBudget.
func withBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, admissionBudget)
}

// await calls done every 10 ms until it reports true or fails, for at
// most freshWait and no later than just before ctx's deadline (then it
// reports false): what the cache has not seen yet it sees within moments.
func await(ctx context.Context, done func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(freshWait)
	if d, ok := ctx.Deadline(); ok && d.Add(-50*time.Millisecond).Before(deadline) {
		deadline = d.Add(-50 * time.Millisecond)
	}
	for {
		ok, err := done()
		if ok || err != nil || time.Now().After(deadline) {
			return ok, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// policies reads the SandboxPolicies that govern namespace, once the
// cache holds the policy whose entry made the call, and namespace's labels
// as the API server matched them: an entry calls only for namespaces its
// policy selects, so a policy of the entry's generation that does not
// select the namespace in the cache means a relabelling not seen yet.
func (v *policyView) policies(ctx context.Context, namespace string) (policy.Set, error) {
	if err := v.fresh(ctx); err != nil {
		return nil, err
	}
	e, byPolicy := ctx.Value(policyRefKey{}).(entryRef)
	ref := e.PolicyRef
	var set policy.Set
	seen, err := await(ctx, func() (bool, error) {
		ns := metadataOf(corev1.SchemeGroupVersion.WithKind("Namespace"))
		found, err := v.get(ctx, types.NamespacedName{Name: namespace}, ns)
		if err != nil {
			return false, fmt.Errorf("reading namespace %s from the cache: %w", namespace, err)
		}
		if !found {
			return false, fmt.Errorf("namespace %s is not in this webhook replica's cache yet; retry", namespace)
		}
		// The policies are only read, so the cache's own objects serve:
		// no copy of every policy on every admission.
		all := &v1alpha1.SandboxPolicyList{}
		if err := v.Reader.List(ctx, all, client.UnsafeDisableDeepCopy); err != nil {
			return false, fmt.Errorf("listing SandboxPolicies: %w", err)
		}
		set, err = policy.Select(all.Items, ns.Labels)
		return err == nil && (!byPolicy || !lacks(set, all.Items, ref)), err
	})
	if err == nil && !seen {
		err = fmt.Errorf("namespace %s is selected by SandboxPolicy %q by its labels as the API server has them, not yet as this webhook replica's cache has them; retry", namespace, ref.Name)
	}
	if err != nil {
		return nil, err
	}
	return set, nil
}

// fenced checks that namespace has, as set's policies call for them, the
// NetworkPolicy of each with spec.network: a sandbox Pod does not start
// before its fence is up (networkSync writes it as the namespace comes
// under the policy), nor after it was changed (networkSync puts it back).
func (v *policyView) fenced(ctx context.Context, namespace string, set policy.Set) error {
	for _, p := range set {
		want := policy.NetworkPolicy(p, namespace)
		if want == nil {
			continue
		}
		have := &networkingv1.NetworkPolicy{}
		found, err := v.get(ctx, client.ObjectKeyFromObject(want), have)
		if err != nil {
			return fmt.Errorf("reading NetworkPolicy %s/%s from the cache: %w", namespace, want.Name, err)
		}
		if !found || drifted(*have, *want) {
			state := "has no NetworkPolicy " + want.Name + " yet"
			if found {
				state = "has NetworkPolicy " + want.Name + " changed from what the policy calls for"
			}
			return fmt.Errorf("SandboxPolicy %q fences sandbox Pods off the network, and namespace %s %s: asrl-webhook's elected replica writes it (if this lasts, its log says why; it needs write access to networkpolicies); the sandbox's controller retries", p.Name, namespace, state)
		}
	}
	return nil
}

// lacks reports whether set lacks the policy ref although all has it at
// ref's generation.
func lacks(set policy.Set, all []v1alpha1.SandboxPolicy, ref PolicyRef) bool {
	same := func(p v1alpha1.SandboxPolicy) bool { return p.UID == ref.UID && p.Generation == ref.Generation }
	return slices.ContainsFunc(all, same) && !slices.ContainsFunc(set, same)
}

// get reads key from the cache, waiting up to freshWait for an object the
// cache has not seen yet: a Sandbox is created moments before its Pod.
func (v *policyView) get(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	return await(ctx, func() (bool, error) {
		err := v.Reader.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// metadataOf is an object of kind gvk as a metadata-only cache holds it:
// admissions read only labels and owners, so the webhook keeps no more.
func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return obj
}
