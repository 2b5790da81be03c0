package webhook

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// TestCheckOtherPod: in a governed namespace a Pod is a sandbox Pod, or
// one the policy's otherPodSelector selects; the adoptable label is
// refused on any, as created or added. The conditions the API server
// evaluates send exactly the Pods CheckOtherPod refuses.
func TestCheckOtherPod(t *testing.T) {
	policies := map[string]*metav1.LabelSelector{
		"none selected": nil,
		"every Pod":     {},
		"app=trainer":   {MatchLabels: map[string]string{"app": "trainer"}},
		"tier in (a, b), no debug": {MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
			{Key: "debug", Operator: metav1.LabelSelectorOpDoesNotExist},
		}},
		"role not worker, has team": {MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "role", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"worker"}},
			{Key: "team", Operator: metav1.LabelSelectorOpExists},
		}},
		"empty value": {MatchLabels: map[string]string{"flag": ""}},
	}
	pods := map[string]map[string]string{
		"no labels":                 nil,
		"a sandbox Pod":             {SandboxPodLabel: "abc"},
		"a sandbox Pod, adoptable":  {SandboxPodLabel: "abc", AdoptableLabel: "true"},
		"adoptable":                 {AdoptableLabel: "true", "app": "trainer"},
		"app=trainer":               {"app": "trainer"},
		"app=other":                 {"app": "other"},
		"tier=a":                    {"tier": "a"},
		"tier=a, debug":             {"tier": "a", "debug": "1"},
		"tier=c":                    {"tier": "c"},
		"team, no role":             {"team": "x"},
		"team, role=worker":         {"team": "x", "role": "worker"},
		"team, role=lead":           {"team": "x", "role": "lead"},
		"flag empty":                {"flag": ""},
		"flag set":                  {"flag": "1"},
		"a sandbox Pod, app=other":  {SandboxPodLabel: "abc", "app": "other"},
		"adoptable=false, selected": {AdoptableLabel: "false", "app": "trainer"},
	}
	for pname, sel := range policies {
		p := v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.SandboxPolicySpec{OtherPodSelector: sel}}
		shipped, perPolicy := callMatcher(t, OtherPodUpdateCondition), callMatcher(t, OtherPodCondition(p))
		for name, podLabels := range pods {
			t.Run(pname+"/"+name, func(t *testing.T) {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "governed", Labels: podLabels}}
				d := CheckOtherPod(&pod.ObjectMeta, nil, Set{p})
				if sent := calls(t, shipped, pod) && calls(t, perPolicy, pod); sent != (d != nil) {
					t.Errorf("the API server calls the webhook: %v; CheckOtherPod: %v", sent, d)
				}
				if d != nil && !strings.Contains(d.Error(), `denied by SandboxPolicy "p": metadata.labels`) {
					t.Errorf("the denial does not name the policy and field: %v", d)
				}
			})
		}
	}
	want := map[string]bool{ // refused under "app=trainer"
		"no labels": true, "a sandbox Pod": false, "a sandbox Pod, adoptable": true, "adoptable": true,
		"app=trainer": false, "app=other": true, "adoptable=false, selected": true,
	}
	p := v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.SandboxPolicySpec{OtherPodSelector: policies["app=trainer"]}}
	for name, refused := range want {
		if d := CheckOtherPod(&metav1.ObjectMeta{Labels: pods[name]}, nil, Set{p}); (d != nil) != refused {
			t.Errorf("%s under app=trainer: %v, want refused %v", name, d, refused)
		}
	}
	if d := CheckOtherPod(&metav1.ObjectMeta{}, nil, nil); d != nil {
		t.Errorf("a namespace no policy governs: %v", d)
	}
}

// TestOtherPodUpdates: an update is refused, and sent, only when it adds
// the adoptable label; the sandbox label added later is MutateUpdate's.
func TestOtherPodUpdates(t *testing.T) {
	p := v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	shipped, perPolicy := callMatcher(t, OtherPodUpdateCondition), callMatcher(t, OtherPodCondition(p))
	for _, tt := range []struct {
		name     string
		old, new map[string]string
		refused  bool
	}{
		{"a plain Pod's label changed", map[string]string{"a": "1"}, map[string]string{"a": "2"}, false},
		{"the adoptable label added", map[string]string{"a": "1"}, map[string]string{"a": "1", AdoptableLabel: "true"}, true},
		{"the adoptable label added to a sandbox Pod", map[string]string{SandboxPodLabel: "h"}, map[string]string{SandboxPodLabel: "h", AdoptableLabel: "true"}, true},
		{"the adoptable label kept", map[string]string{AdoptableLabel: "true"}, map[string]string{AdoptableLabel: "true", "b": "2"}, false},
		{"the sandbox label added", map[string]string{}, map[string]string{SandboxPodLabel: "h"}, false},
		{"a label added to a Pod that had none", nil, map[string]string{"a": "1"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: tt.old}}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: tt.new}}
			d := CheckOtherPod(&pod.ObjectMeta, &old.ObjectMeta, Set{p})
			if (d != nil) != tt.refused {
				t.Errorf("CheckOtherPod: %v, want refused %v", d, tt.refused)
			}
			attr := updateAttributes(old, pod, "")
			sent := shipped.Match(context.Background(), attr, nil, nil).Matches && perPolicy.Match(context.Background(), attr, nil, nil).Matches
			if sent != tt.refused {
				t.Errorf("the API server calls the webhook: %v, want %v", sent, tt.refused)
			}
		})
	}
}
