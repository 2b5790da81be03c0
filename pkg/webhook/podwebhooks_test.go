package webhook

import (
	"encoding/json"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/webhook/policy"
)

func namespace(name string, labels ...string) corev1.Namespace {
	ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelMetadataName: name}}}
	for i := 0; i+1 < len(labels); i += 2 {
		ns.Labels[labels[i]] = labels[i+1]
	}
	return ns
}

func selecting(name string, matchLabels map[string]string, edit ...func(*v1alpha1.SandboxPolicySpec)) v1alpha1.SandboxPolicy {
	p := v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: matchLabels}}}
	for _, e := range edit {
		e(&p.Spec)
	}
	return p
}

func shippedPodWebhook() admissionregistrationv1.MutatingWebhook {
	fail := admissionregistrationv1.Fail
	return admissionregistrationv1.MutatingWebhook{Name: PodWebhookName, FailurePolicy: &fail,
		ClientConfig:   admissionregistrationv1.WebhookClientConfig{CABundle: []byte("ca")},
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: SandboxPodLabel, Operator: metav1.LabelSelectorOpExists}}}}
}

// entry is what the test reads of a webhook entry: whom it serves and
// when it calls.
type entry struct {
	name, selector, condition string
}

func entries(t *testing.T, ws []admissionregistrationv1.MutatingWebhook) []entry {
	t.Helper()
	var out []entry
	for _, w := range ws {
		sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		e := entry{name: w.Name, selector: sel.String()}
		for _, c := range w.MatchConditions {
			e.condition += c.Name + "=" + c.Expression
		}
		if w.ObjectSelector == nil || w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s lost the shipped selectors or failure policy", w.Name)
		}
		out = append(out, e)
	}
	return out
}

func TestPodWebhooks(t *testing.T) {
	rl := selecting("rl", map[string]string{"team": "rl"})
	gvisor := selecting("gvisor", map[string]string{"sandbox": "gvisor"}, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "gvisor" })
	cache := selecting("cache", map[string]string{"team": "eval"}, func(s *v1alpha1.SandboxPolicySpec) { s.NodeCache = &v1alpha1.NodeCachePolicy{} })
	call := func(ps ...v1alpha1.SandboxPolicy) string {
		return CallConditionName + "=" + policy.CallCondition(policy.Set(ps))
	}
	hashed := func(ps ...v1alpha1.SandboxPolicy) string {
		return entryName(PodWebhookName, policy.CallCondition(policy.Set(ps)))
	}
	for _, tt := range []struct {
		name       string
		base       func(*admissionregistrationv1.MutatingWebhook)
		namespaces []corev1.Namespace
		policies   []v1alpha1.SandboxPolicy
		want       []entry
	}{
		{"no namespaces yet", nil, nil, []v1alpha1.SandboxPolicy{rl}, []entry{{PodWebhookName, "", ""}}},
		{"namespaces without policy are never called", nil, []corev1.Namespace{namespace("a"), namespace("b")}, []v1alpha1.SandboxPolicy{rl},
			[]entry{{PodWebhookName, "kubernetes.io/metadata.name notin (a,b)", ""}}},
		{"a policy set's namespaces share an entry", nil,
			[]corev1.Namespace{namespace("rl-1", "team", "rl"), namespace("plain"), namespace("rl-2", "team", "rl")}, []v1alpha1.SandboxPolicy{rl},
			[]entry{
				{hashed(rl), "kubernetes.io/metadata.name in (rl-1,rl-2)", call(rl)},
				{PodWebhookName, "kubernetes.io/metadata.name notin (plain,rl-1,rl-2)", ""},
			}},
		{"each set its own", nil,
			[]corev1.Namespace{namespace("rl-1", "team", "rl"), namespace("both", "team", "rl", "sandbox", "gvisor"), namespace("eval", "team", "eval")},
			[]v1alpha1.SandboxPolicy{rl, gvisor, cache},
			[]entry{
				{hashed(gvisor, rl), "kubernetes.io/metadata.name in (both)", call(gvisor, rl)},
				{hashed(rl), "kubernetes.io/metadata.name in (rl-1)", call(rl)},
				{hashed(cache), "kubernetes.io/metadata.name in (eval)", ""},
				{PodWebhookName, "kubernetes.io/metadata.name notin (both,eval,rl-1)", ""},
			}},
		{"the shipped namespace selector stays", func(w *admissionregistrationv1.MutatingWebhook) {
			w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
		}, []corev1.Namespace{namespace("rl-1", "team", "rl", "env", "prod"), namespace("dev", "team", "rl")}, []v1alpha1.SandboxPolicy{rl},
			[]entry{
				{hashed(rl), "env=prod,kubernetes.io/metadata.name in (rl-1)", call(rl)},
				{PodWebhookName, "env=prod,kubernetes.io/metadata.name notin (rl-1)", ""},
			}},
		{"a policy that cannot be read leaves the shipped entry", nil, []corev1.Namespace{namespace("rl-1", "team", "rl")},
			[]v1alpha1.SandboxPolicy{rl, {ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1alpha1.SandboxPolicySpec{NamespaceSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}}}},
			[]entry{{PodWebhookName, "", ""}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := shippedPodWebhook()
			if tt.base != nil {
				tt.base(&base)
			}
			got := entries(t, PodWebhooks(base, tt.namespaces, tt.policies))
			// The hashed names sort among themselves; compare as sets
			// but for the shipped entry, which comes last.
			less := func(a, b entry) int {
				if a.name < b.name {
					return -1
				}
				if a.name > b.name {
					return 1
				}
				return 0
			}
			slices.SortFunc(got[:len(got)-1], less)
			want := slices.Clone(tt.want)
			slices.SortFunc(want[:len(want)-1], less)
			if !slices.Equal(got, want) {
				t.Errorf("got  %q\nwant %q", got, want)
			}
		})
	}
}

func TestSyncPodWebhooks(t *testing.T) {
	template := admissionregistrationv1.MutatingWebhook{Name: "sandbox-templates.sandbox-fleet.io"}
	shipped := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "asrl-webhook"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{shippedPodWebhook(), template}}
	namespaces := []corev1.Namespace{namespace("rl-1", "team", "rl"), namespace("plain")}
	policies := []v1alpha1.SandboxPolicy{selecting("rl", map[string]string{"team": "rl"})}

	synced, changed, err := SyncPodWebhooks(shipped, namespaces, policies)
	if err != nil || !changed {
		t.Fatalf("first sync: changed %v, %v", changed, err)
	}
	names := func(c *admissionregistrationv1.MutatingWebhookConfiguration) []string {
		var out []string
		for _, w := range c.Webhooks {
			out = append(out, w.Name)
			if IsPodWebhook(w.Name) && string(w.ClientConfig.CABundle) != "ca" {
				t.Errorf("%s lacks the rotator's CA", w.Name)
			}
		}
		return out
	}
	if got := names(synced); len(got) != 3 || got[0] != template.Name || got[2] != PodWebhookName {
		t.Errorf("entries %v: want the template webhook kept, one for rl-1, the shipped one", got)
	}
	if len(shipped.Webhooks) != 2 {
		t.Errorf("the configuration passed in was changed")
	}

	if _, changed, err := SyncPodWebhooks(synced, namespaces, policies); err != nil || changed {
		t.Errorf("a second sync changed %v (%v)", changed, err)
	}

	rotated := synced.DeepCopy()
	for i := range rotated.Webhooks {
		rotated.Webhooks[i].ClientConfig.CABundle = []byte("new ca")
	}
	if _, changed, err := SyncPodWebhooks(rotated, namespaces, policies); err != nil || changed {
		t.Errorf("a new CA made the sync rewrite the entries (%v)", err)
	}

	gone, changed, err := SyncPodWebhooks(synced, namespaces, nil)
	if err != nil || !changed {
		t.Fatalf("after the policy is deleted: changed %v, %v", changed, err)
	}
	if got := names(gone); len(got) != 2 || got[1] != PodWebhookName {
		t.Errorf("entries without policy %v", got)
	}
	var rec podWebhooksRecord
	if err := json.Unmarshal([]byte(gone.Annotations[podWebhooksAnnotation]), &rec); err != nil || rec.Base.NamespaceSelector != nil {
		t.Errorf("the shipped entry is not what the record keeps: %+v (%v)", rec.Base, err)
	}

	// Re-applying the manifests over synced entries: the shipped entry as
	// applied now is the base, and the stale entries go.
	reapplied := synced.DeepCopy()
	ns := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	reapplied.Webhooks[2] = shippedPodWebhook()
	reapplied.Webhooks[2].NamespaceSelector = ns
	out, changed, err := SyncPodWebhooks(reapplied, append(namespaces, namespace("rl-prod", "team", "rl", "env", "prod")), policies)
	if err != nil || !changed {
		t.Fatalf("after a re-apply: changed %v, %v", changed, err)
	}
	got := entries(t, out.Webhooks[1:])
	if len(got) != 2 || got[0].selector != "env=prod,kubernetes.io/metadata.name in (rl-prod)" || got[1].selector != "env=prod,kubernetes.io/metadata.name notin (rl-prod)" {
		t.Errorf("after a re-apply: %q", got)
	}

	if _, changed, _ := SyncPodWebhooks(&admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: []admissionregistrationv1.MutatingWebhook{template}}, namespaces, policies); changed {
		t.Errorf("a configuration without the sandbox Pod webhook was changed")
	}
}
