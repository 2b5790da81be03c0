package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// How the webhook configurations are kept so that a sandbox Pod or
// SandboxTemplate in a namespace a SandboxPolicy selects is never admitted
// unchecked, and a GitOps tool re-applying the manifests has nothing to
// undo:
//
//   - The shipped configurations hold the entries as templates, made inert
//     by Inert in their namespace selector, and are never changed but for
//     their CA bundle. The webhook writes, into the shipped and otherwise
//     empty configurations named PoliciesSuffix, one copy of each template
//     per policy, whose namespace selector is the template's and the
//     policy's: the API server matches it against the namespace's labels
//     as its own cache has them, so a namespace labelled into a policy is
//     checked within moments, with no rewrite.
//   - A policy is in force before its creation or change is stored: the
//     shipped validating entry for SandboxPolicies has the webhook add a
//     copy of each template for the policy as admitted, calling without
//     condition (its pending entries), and refuses the change when it
//     cannot. The elected replica replaces them by the policy's own entries
//     once its cache holds that generation, and says so in the policy's
//     InForce condition.
//   - Each copy's path names the policy, UID and generation it stands for,
//     and a replica answers only once its cache holds that generation or a
//     newer one, so no replica decides on a policy older than the entry
//     that called it, and none reads the API server to decide.
//   - With --skip-compliant-pods, a policy's sandbox Pod entry has the CEL
//     matchCondition policy.CallCondition compiles from it, so a Pod that
//     complies (as a mutated template makes it) is not sent; a policy whose
//     namespaces another policy may also select calls unconditionally,
//     since the condition of one policy cannot judge what two merged would
//     do.

// Inert is the namespace selector requirement that keeps a shipped entry
// from matching any namespace — the API server labels every namespace
// with its name — and marks it as a template for the policies' entries.
var Inert = metav1.LabelSelectorRequirement{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpDoesNotExist}

// PoliciesSuffix names the configurations holding the policies' entries:
// the shipped configuration's name with it.
const PoliciesSuffix = "-policies"

// CallConditionName names the matchCondition of sandbox Pod entries.
const CallConditionName = "needs-sandbox-policy"

// PolicyRef is a policy as an entry stands for it.
type PolicyRef struct {
	Name       string                `json:"name"`
	UID        types.UID             `json:"uid"`
	Generation int64                 `json:"generation"`
	Selector   *metav1.LabelSelector `json:"selector,omitempty"`
}

// Pending is a policy change the webhook admitted, with entries written
// for it, that the elected replica's cache may not have yet.
type Pending struct {
	PolicyRef
	Admitted time.Time `json:"admitted"`
}

// pendingAnnotation holds, on the mutating configuration named
// PoliciesSuffix, the Pending changes as JSON.
const pendingAnnotation = "sandbox-fleet.io/pending-policies"

func refOf(p v1alpha1.SandboxPolicy) PolicyRef {
	return PolicyRef{Name: p.Name, UID: p.UID, Generation: p.Generation, Selector: p.Spec.NamespaceSelector}
}

// Resolved reports whether view has the change or one after it: then the
// policy's own entries stand for it.
func (p Pending) Resolved(view []v1alpha1.SandboxPolicy) bool {
	i := slices.IndexFunc(view, func(q v1alpha1.SandboxPolicy) bool { return q.Name == p.Name })
	return i >= 0 && (view[i].UID != p.UID || view[i].Generation >= p.Generation)
}

// policyPath is the path at which an entry for ref calls the webhook:
// base/name/uid/generation, and for a pending change the Unix second it
// was admitted.
func policyPath(base string, ref PolicyRef, admitted time.Time) string {
	path := base + "/" + ref.Name + "/" + string(ref.UID) + "/" + strconv.FormatInt(ref.Generation, 10)
	if !admitted.IsZero() {
		path += "/" + strconv.FormatInt(admitted.Unix(), 10)
	}
	return path
}

// ParsePolicyPath reads the policy an entry's call stands for from the
// part of its path after the handler's base path, and when the entry is
// a pending change's, when it was admitted; ok is false for a call by no
// policy's entry.
func ParsePolicyPath(rest string) (ref PolicyRef, admitted time.Time, ok bool) {
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if len(parts) != 3 && len(parts) != 4 || parts[0] == "" || parts[1] == "" {
		return PolicyRef{}, time.Time{}, false
	}
	gen, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return PolicyRef{}, time.Time{}, false
	}
	if len(parts) == 4 {
		at, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil {
			return PolicyRef{}, time.Time{}, false
		}
		admitted = time.Unix(at, 0)
	}
	return PolicyRef{Name: parts[0], UID: types.UID(parts[1]), Generation: gen}, admitted, true
}

// IsTemplate reports whether a shipped entry's namespace selector marks
// it as a template for the policies' entries.
func IsTemplate(sel *metav1.LabelSelector) bool {
	return sel != nil && slices.ContainsFunc(sel.MatchExpressions, isInert)
}

func isInert(r metav1.LabelSelectorRequirement) bool {
	return r.Key == Inert.Key && r.Operator == Inert.Operator
}

// policySelector is the namespace selector of a template's entry for a
// policy selecting sel: the template's without Inert, and sel.
func policySelector(template, sel *metav1.LabelSelector) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	if template != nil {
		out.MatchLabels = maps.Clone(template.MatchLabels)
		for _, r := range template.MatchExpressions {
			if !isInert(r) {
				out.MatchExpressions = append(out.MatchExpressions, *r.DeepCopy())
			}
		}
	}
	if sel != nil {
		for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
			out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{sel.MatchLabels[k]}})
		}
		for _, r := range sel.MatchExpressions {
			out.MatchExpressions = append(out.MatchExpressions, *r.DeepCopy())
		}
	}
	return out
}

// entryName names a template's entry for a policy: the template's name
// with a digest of the policy's, and "-pending" for a pending change.
func entryName(template, policyName string, pending bool) string {
	prefix, domain, _ := strings.Cut(template, ".")
	sum := sha256.Sum256([]byte(policyName))
	name := prefix + "-" + hex.EncodeToString(sum[:5])
	if pending {
		name += "-pending"
	}
	return name + "." + domain
}

// entry is what a template's entry for one policy differs in.
type entry struct {
	name      string
	selector  *metav1.LabelSelector
	path      string
	condition string
}

// entries are the copies of the template named name, with namespace
// selector sel and path, for each policy of view and each pending change;
// condition gives a view policy's sandbox Pod condition ("" for none).
func entries(name string, sel *metav1.LabelSelector, path string, view []v1alpha1.SandboxPolicy, pending []Pending, condition func(v1alpha1.SandboxPolicy) string) []entry {
	var out []entry
	for _, p := range view {
		out = append(out, entry{entryName(name, p.Name, false), policySelector(sel, p.Spec.NamespaceSelector), policyPath(path, refOf(p), time.Time{}), condition(p)})
	}
	for _, p := range pending {
		out = append(out, entry{entryName(name, p.Name, true), policySelector(sel, p.Selector), policyPath(path, p.PolicyRef, p.Admitted), ""})
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return out
}

// podCondition is the matchCondition of p's sandbox Pod entry: p's own
// call condition, or none (always call) when another policy of view may
// select a namespace p selects.
func podCondition(p v1alpha1.SandboxPolicy, view []v1alpha1.SandboxPolicy) string {
	for _, q := range view {
		if q.Name != p.Name && !Disjoint(p.Spec.NamespaceSelector, q.Spec.NamespaceSelector) {
			return ""
		}
	}
	if c := policy.CallCondition(policy.Set{p}); c != "true" {
		return c
	}
	return ""
}

// PolicyWebhooks are the entries of the configurations named
// PoliciesSuffix: for each template among the shipped entries, one per
// policy of view and one per pending change, each with the template's
// rules, failure policy and CA bundle. skipCompliant adds the sandbox Pod
// entries' conditions.
func PolicyWebhooks(shippedMutating []admissionregistrationv1.MutatingWebhook, shippedValidating []admissionregistrationv1.ValidatingWebhook,
	view []v1alpha1.SandboxPolicy, pending []Pending, skipCompliant bool) ([]admissionregistrationv1.MutatingWebhook, []admissionregistrationv1.ValidatingWebhook) {
	none := func(v1alpha1.SandboxPolicy) string { return "" }
	var mutating []admissionregistrationv1.MutatingWebhook
	for _, t := range shippedMutating {
		if !IsTemplate(t.NamespaceSelector) || t.ClientConfig.Service == nil && t.ClientConfig.URL == nil {
			continue
		}
		condition := none
		if skipCompliant && strings.HasSuffix(clientPath(t.ClientConfig), MutatePodsPath) {
			condition = func(p v1alpha1.SandboxPolicy) string { return podCondition(p, view) }
		}
		for _, e := range entries(t.Name, t.NamespaceSelector, clientPath(t.ClientConfig), view, pending, condition) {
			w := *t.DeepCopy()
			w.Name, w.NamespaceSelector, w.ClientConfig = e.name, e.selector, withPath(t.ClientConfig, e.path)
			if e.condition != "" {
				w.MatchConditions = append(w.MatchConditions, admissionregistrationv1.MatchCondition{Name: CallConditionName, Expression: e.condition})
			}
			mutating = append(mutating, w)
		}
	}
	var validating []admissionregistrationv1.ValidatingWebhook
	for _, t := range shippedValidating {
		if !IsTemplate(t.NamespaceSelector) || t.ClientConfig.Service == nil && t.ClientConfig.URL == nil {
			continue
		}
		// The other Pod entries always have their policy's condition: it
		// sends only the Pods it refuses, so with the webhook down the
		// Pods the policy lets in are still created.
		condition := none
		if strings.HasSuffix(clientPath(t.ClientConfig), ValidateOtherPodsPath) {
			condition = policy.OtherPodCondition
		}
		for _, e := range entries(t.Name, t.NamespaceSelector, clientPath(t.ClientConfig), view, pending, condition) {
			w := *t.DeepCopy()
			w.Name, w.NamespaceSelector, w.ClientConfig = e.name, e.selector, withPath(t.ClientConfig, e.path)
			if e.condition != "" {
				w.MatchConditions = append(w.MatchConditions, admissionregistrationv1.MatchCondition{Name: CallConditionName, Expression: e.condition})
			}
			validating = append(validating, w)
		}
	}
	return mutating, validating
}

// clientPath is the path a client configuration calls: its Service's, or
// its URL's after the host.
func clientPath(cc admissionregistrationv1.WebhookClientConfig) string {
	if cc.Service != nil {
		if cc.Service.Path == nil {
			return ""
		}
		return *cc.Service.Path
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(*cc.URL, "https://"), "http://")
	if i := strings.Index(rest, "/"); i >= 0 {
		return rest[i:]
	}
	return ""
}

// withPath is cc calling path instead.
func withPath(cc admissionregistrationv1.WebhookClientConfig, path string) admissionregistrationv1.WebhookClientConfig {
	out := *cc.DeepCopy()
	if out.Service != nil {
		out.Service.Path = &path
		return out
	}
	u := strings.TrimSuffix(*out.URL, clientPath(cc)) + path
	out.URL = &u
	return out
}

// Disjoint reports whether no namespace's labels can match both a and b
// (nil selects every namespace): some key is required by one with values
// the other rules out. It errs toward false.
func Disjoint(a, b *metav1.LabelSelector) bool {
	ra, rb := requirements(a), requirements(b)
	for _, x := range ra {
		for _, y := range rb {
			if x.Key == y.Key && (excludes(x, y) || excludes(y, x)) {
				return true
			}
		}
	}
	return false
}

func requirements(sel *metav1.LabelSelector) []metav1.LabelSelectorRequirement {
	if sel == nil {
		return nil
	}
	out := slices.Clone(sel.MatchExpressions)
	for k, v := range sel.MatchLabels {
		out = append(out, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
	}
	return out
}

// excludes reports whether a label value meeting x can never meet y.
func excludes(x, y metav1.LabelSelectorRequirement) bool {
	switch {
	case x.Operator == metav1.LabelSelectorOpIn && y.Operator == metav1.LabelSelectorOpIn:
		return !slices.ContainsFunc(x.Values, func(v string) bool { return slices.Contains(y.Values, v) })
	case x.Operator == metav1.LabelSelectorOpIn && y.Operator == metav1.LabelSelectorOpNotIn:
		return !slices.ContainsFunc(x.Values, func(v string) bool { return !slices.Contains(y.Values, v) })
	case x.Operator == metav1.LabelSelectorOpIn || x.Operator == metav1.LabelSelectorOpExists:
		return y.Operator == metav1.LabelSelectorOpDoesNotExist
	}
	return false
}

// ReadPending reads the pending changes recorded on cfg.
func ReadPending(cfg *admissionregistrationv1.MutatingWebhookConfiguration) ([]Pending, error) {
	s := cfg.Annotations[pendingAnnotation]
	if s == "" {
		return nil, nil
	}
	var out []Pending
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("annotation %s of MutatingWebhookConfiguration %s: %w", pendingAnnotation, cfg.Name, err)
	}
	return out, nil
}

// writePending records pending on cfg.
func writePending(cfg *admissionregistrationv1.MutatingWebhookConfiguration, pending []Pending) {
	if len(pending) == 0 {
		delete(cfg.Annotations, pendingAnnotation)
		return
	}
	slices.SortFunc(pending, func(a, b Pending) int { return strings.Compare(a.Name, b.Name) })
	b, _ := json.Marshal(pending)
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	cfg.Annotations[pendingAnnotation] = string(b)
}
