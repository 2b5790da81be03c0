package webhook

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// AdoptableLabel is the label by which the Agent Sandbox controller adopts
// an unowned Pod into the Sandbox of its name, then labels it a sandbox
// Pod: a way to make a sandbox of a Pod no policy checked at creation.
const AdoptableLabel = "agents.x-k8s.io/adoptable"

// CheckOtherPod refuses, in a namespace the set governs, a Pod that would
// escape the sandbox Pod checks: one created without the sandbox label
// (never sent to them) that no policy's spec.otherPodSelector selects,
// and one given AdoptableLabel, created with it or by an update adding it.
// pod is the Pod's metadata; old its metadata before an update, nil for a
// creation.
func CheckOtherPod(pod, old *metav1.ObjectMeta, set Set) *Denial {
	if len(set) == 0 {
		return nil
	}
	_, adoptable := pod.Labels[AdoptableLabel]
	if adoptable && (old == nil || !hasKey(old.Labels, AdoptableLabel)) {
		return &Denial{Policies: []string{set[0].Name}, Field: fmt.Sprintf("metadata.labels[%q]", AdoptableLabel),
			Reason: "the Agent Sandbox controller would adopt the Pod into a Sandbox unchecked; in a namespace a SandboxPolicy governs, only the controller makes sandbox Pods: create a Sandbox or SandboxClaim instead"}
	}
	if old != nil || hasKey(pod.Labels, SandboxPodLabel) {
		return nil
	}
	for _, p := range set {
		if !selectsOtherPod(p.Spec.OtherPodSelector, pod.Labels) {
			return &Denial{Policies: []string{p.Name}, Field: "metadata.labels",
				Reason: fmt.Sprintf("the Pod is no sandbox Pod (the Agent Sandbox controller labels those %s) and spec.otherPodSelector does not select it: "+
					"run it in a namespace no SandboxPolicy governs, or give it labels the policy's spec.otherPodSelector selects", SandboxPodLabel)}
		}
	}
	return nil
}

func hasKey(m map[string]string, key string) bool {
	_, ok := m[key]
	return ok
}

// selectsOtherPod reports whether sel selects a Pod labelled podLabels:
// nil selects none, {} every Pod, an invalid selector none.
func selectsOtherPod(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(podLabels))
}

// OtherPodConditionName names OtherPodUpdateCondition among the other Pod
// entry's matchConditions, and OtherPodCondition among a policy's copy's.
const OtherPodConditionName = "pod-escapes-sandbox-policy"

// OtherPodUpdateCondition is a CEL expression, for the shipped other Pod
// entry's matchConditions whatever the policies: it sends every creation
// and only the updates that add AdoptableLabel, so the controllers' other
// updates of a governed namespace's Pods are not sent — and not refused
// while the webhook is down.
var OtherPodUpdateCondition = fmt.Sprintf("request.operation == 'CREATE' || %s && !%s", hasLabel("object", AdoptableLabel), hasLabel("oldObject", AdoptableLabel))

// OtherPodCondition is a CEL expression, for a policy's copy of the other
// Pod entry, that is true exactly when CheckOtherPod under p alone
// refuses a Pod being created, so the API server calls the webhook only to
// refuse — and with the webhook down admits the Pods p lets in.
func OtherPodCondition(p v1alpha1.SandboxPolicy) string {
	return fmt.Sprintf("request.operation != 'CREATE' || %s || !%s && !(%s)",
		hasLabel("object", AdoptableLabel), hasLabel("object", SandboxPodLabel), selectorCEL(p.Spec.OtherPodSelector, "object"))
}

// hasLabel is CEL for whether obj has the label key.
func hasLabel(obj, key string) string {
	return fmt.Sprintf("%s.metadata.?labels[?%s].hasValue()", obj, quote(key))
}

// selectorCEL is CEL for whether sel selects obj by its labels, as
// selectsOtherPod decides: nil selects nothing, {} everything, an
// invalid selector nothing.
func selectorCEL(sel *metav1.LabelSelector, obj string) string {
	if sel == nil {
		return "false"
	}
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return "false"
	}
	value := func(key string) string { return fmt.Sprintf("%s.metadata.labels[%s]", obj, quote(key)) }
	var terms []string
	for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
		terms = append(terms, fmt.Sprintf("%s && %s == %s", hasLabel(obj, k), value(k), quote(sel.MatchLabels[k])))
	}
	for _, r := range sel.MatchExpressions {
		values := "[" + strings.Join(quoteAll(r.Values), ", ") + "]"
		switch r.Operator {
		case metav1.LabelSelectorOpIn:
			terms = append(terms, fmt.Sprintf("%s && %s in %s", hasLabel(obj, r.Key), value(r.Key), values))
		case metav1.LabelSelectorOpNotIn:
			terms = append(terms, fmt.Sprintf("(!%s || !(%s in %s))", hasLabel(obj, r.Key), value(r.Key), values))
		case metav1.LabelSelectorOpExists:
			terms = append(terms, hasLabel(obj, r.Key))
		case metav1.LabelSelectorOpDoesNotExist:
			terms = append(terms, "!"+hasLabel(obj, r.Key))
		}
	}
	if len(terms) == 0 {
		return "true"
	}
	return strings.Join(terms, " && ")
}
