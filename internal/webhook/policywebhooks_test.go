package webhook

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

func selecting(name string, matchLabels map[string]string, edit ...func(*v1alpha1.SandboxPolicySpec)) v1alpha1.SandboxPolicy {
	p := v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: matchLabels}}}
	for _, e := range edit {
		e(&p.Spec)
	}
	return p
}

// shipped are the template entries as manifests/webhook/webhooks.yaml
// ships them, and a validating entry that is no template.
func shipped() ([]admissionregistrationv1.MutatingWebhook, []admissionregistrationv1.ValidatingWebhook) {
	fail := admissionregistrationv1.Fail
	inert := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{Inert}}
	service := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{CABundle: []byte("ca"),
			Service: &admissionregistrationv1.ServiceReference{Namespace: "sandbox-fleet-system", Name: "asrl-webhook", Path: ptr.To(path)}}
	}
	objects := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: policy.SandboxPodLabel, Operator: metav1.LabelSelectorOpExists}}}
	return []admissionregistrationv1.MutatingWebhook{
			{Name: PodWebhookName, ClientConfig: service(MutatePodsPath), NamespaceSelector: inert, ObjectSelector: objects, FailurePolicy: &fail},
			{Name: "sandbox-templates.sandbox-fleet.io", ClientConfig: service(MutateTemplatesPath), NamespaceSelector: inert, FailurePolicy: &fail},
		}, []admissionregistrationv1.ValidatingWebhook{
			{Name: "sandbox-templates.sandbox-fleet.io", ClientConfig: service(ValidateTemplatesPath), NamespaceSelector: inert, FailurePolicy: &fail},
			{Name: "sandbox-policies.sandbox-fleet.io", ClientConfig: service(ValidatePoliciesPath), FailurePolicy: &fail},
		}
}

// row is what the test reads of an entry: whom it serves, what it calls
// and when.
type row struct{ selector, path, condition string }

func rows(t *testing.T, ms []admissionregistrationv1.MutatingWebhook, vs []admissionregistrationv1.ValidatingWebhook) []row {
	t.Helper()
	var out []row
	add := func(name string, sel *metav1.LabelSelector, cc admissionregistrationv1.WebhookClientConfig, fp *admissionregistrationv1.FailurePolicyType, conds []admissionregistrationv1.MatchCondition) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := row{selector: s.String(), path: *cc.Service.Path}
		for _, c := range conds {
			r.condition += c.Name + "=" + c.Expression
		}
		if string(cc.CABundle) != "ca" || fp == nil || *fp != admissionregistrationv1.Fail {
			t.Errorf("%s lost the template's CA bundle or failure policy", name)
		}
		out = append(out, r)
	}
	for _, w := range ms {
		add(w.Name, w.NamespaceSelector, w.ClientConfig, w.FailurePolicy, w.MatchConditions)
	}
	for _, w := range vs {
		add(w.Name, w.NamespaceSelector, w.ClientConfig, w.FailurePolicy, nil)
	}
	return out
}

func TestPolicyWebhooks(t *testing.T) {
	rl := selecting("rl", map[string]string{"team": "rl"})
	gvisor := selecting("gvisor", map[string]string{"sandbox": "gvisor"}, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "gvisor" })
	eval := selecting("eval", map[string]string{"team": "eval"}, func(s *v1alpha1.SandboxPolicySpec) { s.NodeCache = &v1alpha1.NodeCachePolicy{} })
	everywhere := v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all", UID: "uid-all", Generation: 3}}
	call := func(p v1alpha1.SandboxPolicy) string {
		return CallConditionName + "=" + policy.CallCondition(policy.Set{p})
	}
	at := func(path string, p v1alpha1.SandboxPolicy) string {
		return path + "/" + p.Name + "/" + string(p.UID) + "/" + strconv.FormatInt(p.Generation, 10)
	}
	threeFor := func(sel string, p v1alpha1.SandboxPolicy, podCondition string) []row {
		return []row{{sel, at(MutatePodsPath, p), podCondition}, {sel, at(MutateTemplatesPath, p), ""}, {sel, at(ValidateTemplatesPath, p), ""}}
	}
	for _, tt := range []struct {
		name          string
		view          []v1alpha1.SandboxPolicy
		pending       []Pending
		skipCompliant bool
		want          []row
	}{
		{"no policy, no entries", nil, nil, true, nil},
		{"a policy's entries select its namespaces by their labels", []v1alpha1.SandboxPolicy{rl}, nil, true,
			threeFor("team in (rl)", rl, call(rl))},
		{"without skipping, every Pod is sent", []v1alpha1.SandboxPolicy{rl}, nil, false,
			threeFor("team in (rl)", rl, "")},
		{"policies that cannot share a namespace keep their conditions", []v1alpha1.SandboxPolicy{rl, selecting("other", map[string]string{"team": "other"})}, nil, true,
			append(threeFor("team in (other)", selecting("other", map[string]string{"team": "other"}), call(selecting("other", map[string]string{"team": "other"}))),
				threeFor("team in (rl)", rl, call(rl))...)},
		{"policies that may share a namespace always call", []v1alpha1.SandboxPolicy{rl, gvisor}, nil, true,
			append(threeFor("sandbox in (gvisor)", gvisor, ""), threeFor("team in (rl)", rl, "")...)},
		{"a policy for every namespace", []v1alpha1.SandboxPolicy{everywhere}, nil, true,
			threeFor("", everywhere, CallConditionName+"="+policy.CallCondition(policy.Set{everywhere}))},
		{"node-cache affinity cannot be judged in CEL", []v1alpha1.SandboxPolicy{eval}, nil, true,
			threeFor("team in (eval)", eval, "")},
		{"a pending change calls unconditionally beside the policy's entries", []v1alpha1.SandboxPolicy{rl},
			[]Pending{{PolicyRef: PolicyRef{Name: "rl", UID: "uid-rl", Generation: 2, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "rl2"}}}}}, true,
			[]row{
				{"team in (rl)", at(MutatePodsPath, rl), call(rl)}, {"team in (rl2)", MutatePodsPath + "/rl/uid-rl/2", ""},
				{"team in (rl)", at(MutateTemplatesPath, rl), ""}, {"team in (rl2)", MutateTemplatesPath + "/rl/uid-rl/2", ""},
				{"team in (rl)", at(ValidateTemplatesPath, rl), ""}, {"team in (rl2)", ValidateTemplatesPath + "/rl/uid-rl/2", ""},
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, v := shipped()
			gotM, gotV := PolicyWebhooks(m, v, tt.view, tt.pending, tt.skipCompliant)
			// Entries sort by their hashed names: compare as sets.
			cmpRow := func(a, b row) int { return strings.Compare(a.path+a.selector, b.path+b.selector) }
			got := slices.SortedFunc(slices.Values(rows(t, gotM, gotV)), cmpRow)
			want := slices.SortedFunc(slices.Values(tt.want), cmpRow)
			if !slices.Equal(got, want) {
				t.Errorf("got\n %q\nwant\n %q", got, want)
			}
			for _, w := range gotM {
				if strings.Contains(w.Name, "policies") || IsTemplate(w.NamespaceSelector) {
					t.Errorf("entry %s is a copy of what is no template, or inert", w.Name)
				}
			}
			if len(m[0].NamespaceSelector.MatchExpressions) != 1 || *m[0].ClientConfig.Service.Path != MutatePodsPath {
				t.Error("the shipped entries were changed")
			}
		})
	}
}

// A namespace is matched by a policy's entry exactly when the policy
// selects it, by its labels at the time: a relabelled namespace needs no
// rewrite of the configuration.
func TestPolicyEntriesFollowLabels(t *testing.T) {
	policies := []v1alpha1.SandboxPolicy{
		selecting("rl", map[string]string{"team": "rl"}),
		selecting("prod", nil, func(s *v1alpha1.SandboxPolicySpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "staging"}}, {Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist}}}
		}),
	}
	m, v := shipped()
	m[0].NamespaceSelector.MatchLabels = map[string]string{"sandboxes": "yes"}
	gotM, _ := PolicyWebhooks(m, v, policies, nil, true)
	for _, nsLabels := range []map[string]string{
		{}, {"sandboxes": "yes"}, {"sandboxes": "yes", "team": "rl"}, {"team": "rl"}, {"sandboxes": "yes", "env": "prod"},
		{"sandboxes": "yes", "env": "staging", "legacy": "1"}, {"sandboxes": "yes", "env": "prod", "team": "rl"}, {"sandboxes": "yes", "env": "dev"},
	} {
		ns := labels.Set(nsLabels)
		set, err := policy.Select(policies, nsLabels)
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		for _, p := range set {
			if ns["sandboxes"] == "yes" {
				want = append(want, entryName(m[0].Name, p.Name, false))
			}
		}
		for _, w := range gotM {
			sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
			if err != nil {
				t.Fatal(err)
			}
			if pod, _ := IsPodEntry(w.Name); pod && sel.Matches(ns) {
				got = append(got, w.Name)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("namespace %v: matched by %v, want %v", nsLabels, got, want)
		}
	}
}

func TestDisjoint(t *testing.T) {
	req := func(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	is := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	for _, tt := range []struct {
		name string
		a, b *metav1.LabelSelector
		want bool
	}{
		{"one key, two values", is("team", "rl"), is("team", "eval"), true},
		{"one key, one value", is("team", "rl"), is("team", "rl"), false},
		{"other keys", is("team", "rl"), is("env", "prod"), false},
		{"every namespace", nil, is("team", "rl"), false},
		{"in sets apart", req("team", metav1.LabelSelectorOpIn, "a", "b"), req("team", metav1.LabelSelectorOpIn, "c"), true},
		{"in sets meeting", req("team", metav1.LabelSelectorOpIn, "a", "b"), req("team", metav1.LabelSelectorOpIn, "b"), false},
		{"in against not in all", is("team", "rl"), req("team", metav1.LabelSelectorOpNotIn, "rl", "x"), true},
		{"in against not in some", req("team", metav1.LabelSelectorOpIn, "rl", "y"), req("team", metav1.LabelSelectorOpNotIn, "rl"), false},
		{"exists against does not exist", req("team", metav1.LabelSelectorOpExists), req("team", metav1.LabelSelectorOpDoesNotExist), true},
		{"does not exist against a value", req("team", metav1.LabelSelectorOpDoesNotExist), is("team", "rl"), true},
		{"not in against not in", req("team", metav1.LabelSelectorOpNotIn, "a"), req("team", metav1.LabelSelectorOpNotIn, "b"), false},
	} {
		if got := Disjoint(tt.a, tt.b); got != tt.want {
			t.Errorf("%s: Disjoint %v, want %v", tt.name, got, tt.want)
		}
		if got := Disjoint(tt.b, tt.a); got != tt.want {
			t.Errorf("%s, swapped: Disjoint %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestIsPodEntry(t *testing.T) {
	for _, pending := range []bool{false, true} {
		if pod, p := IsPodEntry(entryName(PodWebhookName, "rl", pending)); !pod || p != pending {
			t.Errorf("the sandbox Pod entry (pending %v) reads as pod %v, pending %v", pending, pod, p)
		}
	}
	for _, name := range []string{PodWebhookName, entryName("sandbox-templates.sandbox-fleet.io", "rl", false)} {
		if pod, _ := IsPodEntry(name); pod {
			t.Errorf("%s reads as a policy's sandbox Pod entry", name)
		}
	}
}

func TestPolicyPath(t *testing.T) {
	ref := PolicyRef{Name: "baseline", UID: "0c5f-11", Generation: 12}
	for _, admitted := range []time.Time{{}, time.Unix(1796000000, 0)} {
		path := policyPath(MutatePodsPath, ref, admitted)
		got, at, ok := ParsePolicyPath(strings.TrimPrefix(path, MutatePodsPath))
		if !ok || got != ref || !at.Equal(admitted) {
			t.Errorf("%s parses as %+v admitted %v (%v)", path, got, at, ok)
		}
	}
	for _, rest := range []string{"", "/", "/baseline", "/baseline/uid", "/baseline/uid/x", "/a/b/1/extra", "/a/b/1/2/3", "//uid/1"} {
		if _, _, ok := ParsePolicyPath(rest); ok {
			t.Errorf("%q parses as a policy's path", rest)
		}
	}
}

func TestPendingResolved(t *testing.T) {
	now := time.Now()
	p := Pending{PolicyRef: PolicyRef{Name: "rl", UID: "uid-rl", Generation: 2}, Admitted: now}
	at := func(uid types.UID, gen int64) []v1alpha1.SandboxPolicy {
		return []v1alpha1.SandboxPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "rl", UID: uid, Generation: gen}}}
	}
	for _, tt := range []struct {
		name string
		view []v1alpha1.SandboxPolicy
		want bool
	}{
		{"not seen yet", nil, false},
		{"an older generation seen", at("uid-rl", 1), false},
		{"its generation seen", at("uid-rl", 2), true},
		{"a newer one seen", at("uid-rl", 3), true},
		{"the policy made anew", at("uid-other", 1), true},
	} {
		if got := p.Resolved(tt.view); got != tt.want {
			t.Errorf("%s: resolved %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPendingAnnotation(t *testing.T) {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "asrl-webhook-policies"}}
	in := []Pending{{PolicyRef: PolicyRef{Name: "b", UID: "2", Generation: 1}, Admitted: time.Unix(100, 0).UTC()},
		{PolicyRef: PolicyRef{Name: "a", UID: "1", Generation: 4, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k": "v"}}}, Admitted: time.Unix(200, 0).UTC()}}
	writePending(cfg, in)
	out, err := ReadPending(cfg)
	if err != nil || len(out) != 2 || out[0].Name != "a" || out[0].Selector.MatchLabels["k"] != "v" || !out[1].Admitted.Equal(time.Unix(100, 0)) {
		t.Errorf("read back %+v (%v)", out, err)
	}
	writePending(cfg, nil)
	if _, ok := cfg.Annotations[pendingAnnotation]; ok {
		t.Error("no pending change left the annotation")
	}
	cfg.Annotations = map[string]string{pendingAnnotation: "{"}
	if _, err := ReadPending(cfg); err == nil || !strings.Contains(err.Error(), "asrl-webhook-policies") {
		t.Errorf("a bad annotation: %v", err)
	}
}

// At most MaxPending policy changes are pending at once; a policy's new
// change takes the place of its last.
func TestWithPending(t *testing.T) {
	change := func(name string) Pending {
		return Pending{PolicyRef: PolicyRef{Name: name, UID: "u-" + types.UID(name), Generation: 1}}
	}
	var recorded []Pending
	for i := range MaxPending {
		var full bool
		if recorded, full = withPending(recorded, change(fmt.Sprint("p", i))); full {
			t.Fatalf("change %d refused", i)
		}
	}
	again := change("p3")
	again.Generation = 2
	out, full := withPending(recorded, again)
	if full || len(out) != MaxPending || out[len(out)-1].Generation != 2 {
		t.Errorf("a pending policy's next change: %d pending, full %v", len(out), full)
	}
	out, full = withPending(recorded, change("one-too-many"))
	if !full || len(out) != MaxPending || slices.ContainsFunc(out, func(p Pending) bool { return p.Name == "one-too-many" }) {
		t.Errorf("a change past MaxPending: %d pending, full %v", len(out), full)
	}
}
