package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// Paths the handlers are served at.
const (
	MutatePodsPath        = "/mutate-sandbox-pods"
	MutateTemplatesPath   = "/mutate-sandbox-templates"
	ValidateTemplatesPath = "/validate-sandbox-templates"
	ValidateSecretsPath   = "/validate-sandbox-secrets"
	ValidateOtherPodsPath = "/validate-other-pods"
)

// Admission outcomes, as metrics label them.
const (
	resultAllowed = "allowed"
	resultMutated = "mutated"
	resultDenied  = "denied"
	resultErrored = "errored"
)

// PodMutator applies the SandboxPolicies of a sandbox Pod's namespace to
// it as it is created.
type PodMutator struct {
	// View serves policies, namespaces and the Pod's owners.
	View   *policyView
	Counts *Counts
	// NodeCaches are the nodes' image caches, for policies with
	// nodeCache; nil turns that off. It is called when such a policy is
	// first met, and the affinity is left out until they are listed.
	NodeCaches func() *informer.Caches
	// Registry gives the layers of images no node lists, without waiting;
	// nil leaves such images out.
	Registry Registry
}

// Registry is what the webhook reads of images no node lists: Known
// starts a read of what it does not have (a registry.Layers), Cached
// never does.
type Registry interface {
	Known(ref string) ([]v1alpha1.Layer, bool)
	Cached(ref string) ([]v1alpha1.Layer, bool)
}

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	ctx, cancel := withBudget(ctx)
	defer cancel()
	return timed("Pod", func() (admission.Response, string) { return m.handle(ctx, req) })
}

func (m *PodMutator) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if resp, result, ok := carries(req, "Pod"); !ok {
		return resp, result
	}
	update := req.Operation == admissionv1.Update
	if req.Operation != admissionv1.Create && !update {
		return admission.Allowed("only creations and updates are checked"), resultAllowed
	}
	if update && req.SubResource != "" && req.SubResource != "ephemeralcontainers" && req.SubResource != "resize" {
		return admission.Allowed("the " + req.SubResource + " subresource changes nothing the policies constrain"), resultAllowed
	}
	pod, old := &corev1.Pod{}, &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the Pod: %w", err)), resultErrored
	}
	if update {
		if len(req.OldObject.Raw) == 0 {
			return admission.Errored(http.StatusBadRequest, errors.New("an update's review carries no old Pod")), resultErrored
		}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the old Pod: %w", err)), resultErrored
		}
	}
	_, sandbox := pod.Labels[policy.SandboxPodLabel]
	_, wasSandbox := old.Labels[policy.SandboxPodLabel]
	if !sandbox && !wasSandbox {
		return admission.Allowed("not a sandbox Pod"), resultAllowed
	}
	namespace := req.Namespace
	set, err := m.View.policies(ctx, namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultErrored
	}
	if len(set) == 0 {
		return admission.Allowed("no SandboxPolicy governs namespace " + namespace), resultAllowed
	}
	dryRun := req.DryRun != nil && *req.DryRun
	switch {
	case update && req.SubResource == "resize":
		if resp, result, done := refused(m.Counts, denialOrNil(policy.CheckResize(pod, set)), dryRun); done {
			return resp, result
		}
		return admission.Allowed("the resize keeps within the SandboxPolicies' caps"), resultAllowed
	case update && req.SubResource == "":
		changes, err := policy.MutateUpdate(old, pod, set)
		if resp, result, done := refused(m.Counts, err, dryRun); done {
			return resp, result
		}
		return m.patched(req, pod, set, changes, dryRun)
	}
	runID, err := m.runID(ctx, namespace, pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultErrored
	}
	if update {
		// Ephemeral containers (kubectl debug) are not mutated — the API
		// server keeps nothing but them from such an update — so one the
		// policies would change is denied, saying what to set.
		if resp, result, done := refused(m.Counts, policy.CheckEphemeral(pod, set, runID), dryRun); done {
			return resp, result
		}
		return admission.Allowed("the ephemeral containers comply with the SandboxPolicies"), resultAllowed
	}
	if err := m.View.fenced(ctx, namespace, set); err != nil {
		return admission.Errored(http.StatusServiceUnavailable, err), resultErrored
	}
	changes, err := policy.Mutate(pod, set, runID)
	if resp, result, done := refused(m.Counts, err, dryRun); done {
		return resp, result
	}
	if weight, ok := set.NodeCacheWeight(); ok && m.preferCachingNodes(pod, set, weight, dryRun) {
		changes = append(changes, "spec.affinity.nodeAffinity: prefer the nodes holding the image")
	}
	return m.patched(req, pod, set, changes, dryRun)
}

// patched answers with the patch from the review's Pod to pod, which the
// set changed as changes say, or allows it as it is.
func (m *PodMutator) patched(req admission.Request, pod *corev1.Pod, set policy.Set, changes []string, dryRun bool) (admission.Response, string) {
	if len(changes) == 0 {
		return admission.Allowed("complies with the SandboxPolicies"), resultAllowed
	}
	mutated, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultErrored
	}
	if !dryRun {
		m.Counts.mutated(set)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, mutated), resultMutated
}

// denialOrNil is d as an error: nil when d is, not an error holding a nil
// *policy.Denial.
func denialOrNil(d *policy.Denial) error {
	if d == nil {
		return nil
	}
	return d
}

// refused answers a review that err refused: a policy's *policy.Denial
// (counted, unless the review is a dry run) or a failure to judge it.
// done is false when err is nil.
func refused(counts *Counts, err error, dryRun bool) (resp admission.Response, result string, done bool) {
	var denial *policy.Denial
	switch {
	case err == nil:
		return admission.Response{}, "", false
	case errors.As(err, &denial):
		if !dryRun {
			counts.denied(denial.Policies)
		}
		return admission.Denied(denial.Error()), resultDenied, true
	default:
		return admission.Errored(http.StatusInternalServerError, err), resultErrored, true
	}
}

// preferCachingNodes adds node affinity toward the nodes holding most of
// the Pod's images (as the policies rewrote them), and reports whether it
// did. An image no node lists is read from its registry only when the
// set allows its registry — a tenant names any host it likes, the
// webhook's own network included — and never for a dry run, which a
// tenant may send as often as it likes.
func (m *PodMutator) preferCachingNodes(pod *corev1.Pod, set policy.Set, weight int32, dryRun bool) bool {
	if m.NodeCaches == nil {
		return false
	}
	caches := m.NodeCaches()
	if caches == nil || !caches.Synced() {
		return false
	}
	unlisted := func(string) ([]v1alpha1.Layer, bool) { return nil, false }
	if m.Registry != nil {
		unlisted = m.Registry.Known
		if dryRun {
			unlisted = m.Registry.Cached
		}
	}
	lookup := func(ref string) ([]v1alpha1.Layer, bool) {
		if !set.AllowsRegistryOf(ref) {
			return nil, false
		}
		return unlisted(ref)
	}
	var missing map[string]int64
	var total int64
	caches.Read(func(x *nodecache.Index) {
		layers := x.PodLayers(images.OfPod(&pod.Spec), lookup)
		total, missing = nodecache.Size(layers), x.Lacking(layers)
	})
	return policy.AddNodeCacheAffinity(pod, weight, missing, total)
}

// runID finds the run a sandbox Pod belongs to: its own label, else its
// Sandbox's, else that of what owns the Sandbox (a warm pool or claim), so
// that Pods of runs started by any client carry it.
func (m *PodMutator) runID(ctx context.Context, namespace string, pod *corev1.Pod) (string, error) {
	if id := pod.Labels[labels.RunID]; id != "" {
		return id, nil
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "Sandbox" {
		return "", nil
	}
	sandbox := metadataOf(sandboxv1beta1.GroupVersion.WithKind("Sandbox"))
	if found, err := m.View.get(ctx, types.NamespacedName{Namespace: namespace, Name: owner.Name}, sandbox); err != nil || !found {
		return "", err
	}
	if id := sandbox.Labels[labels.RunID]; id != "" {
		return id, nil
	}
	parent := metav1.GetControllerOf(sandbox)
	if parent == nil {
		return "", nil
	}
	if parent.Kind != "SandboxWarmPool" && parent.Kind != "SandboxClaim" {
		return "", nil
	}
	obj := metadataOf(extensionsv1beta1.GroupVersion.WithKind(parent.Kind))
	if found, err := m.View.get(ctx, types.NamespacedName{Namespace: namespace, Name: parent.Name}, obj); err != nil || !found {
		return "", err
	}
	return obj.GetLabels()[labels.RunID], nil
}

// TemplateMutator applies the SandboxPolicies of a SandboxTemplate's
// namespace to its Pod template when it is applied, so the Pods made from
// it already comply and the API server need not call PodMutator for them
// (policy.CallCondition). Colocation keys on policy.ColocateLabel, which
// it puts on the Pod template; the run-id label comes from the template's
// own.
type TemplateMutator struct {
	View *policyView
}

// Handle implements admission.Handler.
func (m *TemplateMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	ctx, cancel := withBudget(ctx)
	defer cancel()
	return timed("SandboxTemplate", func() (admission.Response, string) { return m.handle(ctx, req) })
}

func (m *TemplateMutator) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	tmpl, resp, result := decodeTemplate(req)
	if tmpl == nil {
		return resp, result
	}
	set, err := m.View.policies(ctx, req.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultErrored
	}
	changes, err := policy.MutateTemplate(&tmpl.Spec.PodTemplate, set, tmpl.Name, tmpl.Labels[labels.RunID])
	var denial *policy.Denial
	if errors.As(err, &denial) {
		// TemplateValidator denies it, and counts it, with the field's
		// path in the template.
		return admission.Allowed("left to the validating webhook: " + denial.Error()), resultAllowed
	}
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultErrored
	}
	if change := policy.MutateTemplateNetwork(&tmpl.Spec, set); change != "" {
		changes = append(changes, change)
	}
	if len(changes) == 0 {
		return admission.Allowed("complies with the SandboxPolicies"), resultAllowed
	}
	mutated, err := json.Marshal(tmpl)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultErrored
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, mutated), resultMutated
}

// decodeTemplate reads the SandboxTemplate a review carries; when there
// is none to act on it returns the response to give instead.
func decodeTemplate(req admission.Request) (*extensionsv1beta1.SandboxTemplate, admission.Response, string) {
	if resp, result, ok := carries(req, "SandboxTemplate"); !ok {
		return nil, resp, result
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return nil, admission.Allowed(""), resultAllowed
	}
	tmpl := &extensionsv1beta1.SandboxTemplate{}
	if err := json.Unmarshal(req.Object.Raw, tmpl); err != nil {
		return nil, admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the SandboxTemplate: %w", err)), resultErrored
	}
	return tmpl, admission.Response{}, ""
}

// TemplateValidator refuses SandboxTemplates whose Pods the SandboxPolicies
// of their namespace would refuse, so a bad template fails when it is
// applied rather than when its first sandbox starts.
type TemplateValidator struct {
	View   *policyView
	Counts *Counts
}

// Handle implements admission.Handler.
func (v *TemplateValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	ctx, cancel := withBudget(ctx)
	defer cancel()
	return timed("SandboxTemplate", func() (admission.Response, string) { return v.handle(ctx, req) })
}

func (v *TemplateValidator) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	tmpl, resp, result := decodeTemplate(req)
	if tmpl == nil {
		return resp, result
	}
	set, err := v.View.policies(ctx, req.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultErrored
	}
	d := policy.Check(&tmpl.Spec.PodTemplate.Spec, "spec.podTemplate.spec", set)
	if d == nil {
		d = policy.CheckTemplateNetwork(&tmpl.Spec, set)
	}
	if d != nil {
		if req.DryRun == nil || !*req.DryRun {
			v.Counts.denied(d.Policies)
		}
		return admission.Denied(d.Error()), resultDenied
	}
	return admission.Allowed(""), resultAllowed
}

// SecretValidator refuses, in the namespaces SandboxPolicies govern, the
// service account token Secrets they do not allow (policy.CheckSecret).
// Its entries' matchCondition sends only those Secrets' creations.
type SecretValidator struct {
	View   *policyView
	Counts *Counts
}

// Handle implements admission.Handler.
func (v *SecretValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	ctx, cancel := withBudget(ctx)
	defer cancel()
	return timed("Secret", func() (admission.Response, string) { return v.handle(ctx, req) })
}

func (v *SecretValidator) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if resp, result, ok := carries(req, "Secret"); !ok {
		return resp, result
	}
	// Only the type is decoded: the webhook keeps no Secret's data.
	var secret struct {
		Type corev1.SecretType `json:"type"`
	}
	if err := json.Unmarshal(req.Object.Raw, &secret); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the Secret: %w", err)), resultErrored
	}
	if secret.Type != corev1.SecretTypeServiceAccountToken {
		return admission.Allowed("not a service account token Secret"), resultAllowed
	}
	return judged(ctx, req, v.View, v.Counts, "Secret "+req.Namespace+"/"+req.Name,
		func(set policy.Set) *policy.Denial { return policy.CheckSecret(secret.Type, set) },
		"the SandboxPolicies allow service account tokens")
}

// OtherPodValidator refuses, in the namespaces SandboxPolicies govern, the
// Pods that would escape the sandbox Pod checks (policy.CheckOtherPod):
// created without the sandbox label and selected by no policy's
// otherPodSelector, or given the adoptable label. Its entries'
// matchConditions send only those, so with the webhook down the other
// Pods are still created.
type OtherPodValidator struct {
	View   *policyView
	Counts *Counts
}

// Handle implements admission.Handler.
func (v *OtherPodValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	ctx, cancel := withBudget(ctx)
	defer cancel()
	return timed("Pod", func() (admission.Response, string) { return v.handle(ctx, req) })
}

func (v *OtherPodValidator) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if resp, result, ok := carries(req, "Pod"); !ok {
		return resp, result
	}
	// Only the metadata is decoded: labels decide.
	var pod, old struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the Pod: %w", err)), resultErrored
	}
	var before *metav1.ObjectMeta
	if req.Operation == admissionv1.Update {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the Pod before the update: %w", err)), resultErrored
		}
		before = &old.Metadata
	}
	name := req.Name
	if name == "" {
		name = pod.Metadata.GenerateName + "<generated>"
	}
	return judged(ctx, req, v.View, v.Counts, "Pod "+req.Namespace+"/"+name,
		func(set policy.Set) *policy.Denial { return policy.CheckOtherPod(&pod.Metadata, before, set) },
		"a sandbox Pod, or one the SandboxPolicies' otherPodSelector selects")
}

// carries checks a review carries an object of kind, as the handler's
// webhook entry's rules send; ok false comes with the answer to give.
func carries(req admission.Request, kind string) (resp admission.Response, result string, ok bool) {
	if req.Kind.Kind != kind || len(req.Object.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("the review carries no %s (kind %q): check the webhook configuration's rules", kind, req.Kind.Kind)), resultErrored, false
	}
	return admission.Response{}, "", true
}

// judged answers a review of the object named what (kind namespace/name)
// by check under its namespace's policies: refused — counted unless a dry
// run, the object named — or allowed, saying allowed.
func judged(ctx context.Context, req admission.Request, view *policyView, counts *Counts, what string, check func(policy.Set) *policy.Denial, allowed string) (admission.Response, string) {
	set, err := view.policies(ctx, req.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultErrored
	}
	if resp, result, done := refused(counts, denialOrNil(check(set)), req.DryRun != nil && *req.DryRun); done {
		resp.Result.Message = what + ": " + resp.Result.Message
		return resp, result
	}
	return admission.Allowed(allowed), resultAllowed
}
