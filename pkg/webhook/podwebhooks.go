package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/webhook/policy"
)

// PodWebhookName is the sandbox Pod webhook's entry in the
// MutatingWebhookConfiguration as the manifests ship it: called for every
// sandbox Pod.
const PodWebhookName = "sandbox-pods.sandbox-fleet.io"

// CallConditionName names the matchCondition PodWebhooks adds.
const CallConditionName = "needs-sandbox-policy"

// PodWebhooks are the entries that stand for base, the sandbox Pod
// webhook as shipped, so that the API server calls the webhook only when
// it has something to do: one entry per distinct policy set, for the
// namespaces it governs, with the set's policy.CallCondition as a
// matchCondition; none for the namespaces no policy governs; and base
// itself, unconditional, for the namespaces not known yet, so a namespace
// created since is still served. Every entry keeps base's selectors,
// rules and failure policy. With a policy that cannot be read, base alone
// is returned.
func PodWebhooks(base admissionregistrationv1.MutatingWebhook, namespaces []corev1.Namespace, all []v1alpha1.SandboxPolicy) []admissionregistrationv1.MutatingWebhook {
	within := labels.Everything()
	if base.NamespaceSelector != nil {
		var err error
		if within, err = metav1.LabelSelectorAsSelector(base.NamespaceSelector); err != nil {
			return []admissionregistrationv1.MutatingWebhook{base}
		}
	}
	groups := map[string][]string{}
	var known []string
	for _, ns := range namespaces {
		if !within.Matches(labels.Set(ns.Labels)) {
			continue
		}
		set, err := policy.Select(all, ns.Labels)
		if err != nil {
			return []admissionregistrationv1.MutatingWebhook{base}
		}
		known = append(known, ns.Name)
		if cond := policy.CallCondition(set); cond != "false" {
			groups[cond] = append(groups[cond], ns.Name)
		}
	}
	var out []admissionregistrationv1.MutatingWebhook
	for cond, names := range groups {
		w := *base.DeepCopy()
		w.Name = entryName(base.Name, cond)
		w.NamespaceSelector = withNames(base.NamespaceSelector, metav1.LabelSelectorOpIn, names)
		if cond != "true" {
			w.MatchConditions = append(w.MatchConditions, admissionregistrationv1.MatchCondition{Name: CallConditionName, Expression: cond})
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b admissionregistrationv1.MutatingWebhook) int { return strings.Compare(a.Name, b.Name) })
	rest := *base.DeepCopy()
	if len(known) > 0 {
		rest.NamespaceSelector = withNames(base.NamespaceSelector, metav1.LabelSelectorOpNotIn, known)
	}
	return append(out, rest)
}

// entryName names the entry of base for the policy sets whose call
// condition is cond: base's name with a digest of cond, which entries of
// other sets do not share.
func entryName(base, cond string) string {
	prefix, domain, _ := strings.Cut(base, ".")
	sum := sha256.Sum256([]byte(cond))
	return prefix + "-" + hex.EncodeToString(sum[:5]) + "." + domain
}

// withNames is sel narrowed to the namespaces named, or to all others.
func withNames(sel *metav1.LabelSelector, op metav1.LabelSelectorOperator, names []string) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	if sel != nil {
		out = sel.DeepCopy()
	}
	names = slices.Sorted(slices.Values(names))
	out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{Key: corev1.LabelMetadataName, Operator: op, Values: names})
	return out
}

// podWebhooksAnnotation records, on the configuration, the sandbox Pod
// webhook as shipped and a digest of the entries written for it, so the
// next sync starts from what was shipped — and from what was applied
// anew when someone re-applied the manifests over the entries.
const podWebhooksAnnotation = "sandbox-fleet.io/pod-webhooks"

type podWebhooksRecord struct {
	Base   admissionregistrationv1.MutatingWebhook `json:"base"`
	Digest string                                  `json:"digest"`
}

// IsPodWebhook reports whether the webhook entry named name is the
// shipped sandbox Pod webhook or one of the entries PodWebhooks makes of
// it.
func IsPodWebhook(name string) bool {
	prefix, domain, _ := strings.Cut(PodWebhookName, ".")
	return name == PodWebhookName || strings.HasPrefix(name, prefix+"-") && strings.HasSuffix(name, "."+domain)
}

// digest of webhook entries, their CA bundles left out: the certificate
// rotator changes those.
func digest(ws []admissionregistrationv1.MutatingWebhook) string {
	clean := make([]admissionregistrationv1.MutatingWebhook, len(ws))
	for i, w := range ws {
		clean[i] = *w.DeepCopy()
		clean[i].ClientConfig.CABundle = nil
	}
	b, _ := json.Marshal(clean)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SyncPodWebhooks returns cfg with its sandbox Pod webhook entries made
// by PodWebhooks, and whether that changed anything. A configuration
// without the webhook is left alone.
func SyncPodWebhooks(cfg *admissionregistrationv1.MutatingWebhookConfiguration, namespaces []corev1.Namespace, all []v1alpha1.SandboxPolicy) (*admissionregistrationv1.MutatingWebhookConfiguration, bool, error) {
	var current, others []admissionregistrationv1.MutatingWebhook
	for _, w := range cfg.Webhooks {
		if IsPodWebhook(w.Name) {
			current = append(current, w)
		} else {
			others = append(others, w)
		}
	}
	written := digest(current)
	var base *admissionregistrationv1.MutatingWebhook
	if s := cfg.Annotations[podWebhooksAnnotation]; s != "" {
		var rec podWebhooksRecord
		if err := json.Unmarshal([]byte(s), &rec); err != nil {
			return nil, false, fmt.Errorf("annotation %s of MutatingWebhookConfiguration %s: %w", podWebhooksAnnotation, cfg.Name, err)
		}
		if rec.Digest == written {
			base = &rec.Base
		}
	}
	if base == nil {
		i := slices.IndexFunc(current, func(w admissionregistrationv1.MutatingWebhook) bool { return w.Name == PodWebhookName })
		if i < 0 {
			return cfg, false, nil
		}
		base = current[i].DeepCopy()
		base.ClientConfig.CABundle = nil
	}
	want := PodWebhooks(*base, namespaces, all)
	var ca []byte
	if len(current) > 0 {
		ca = current[0].ClientConfig.CABundle
	}
	for i := range want {
		want[i].ClientConfig.CABundle = ca
	}
	b, err := json.Marshal(podWebhooksRecord{Base: *base, Digest: digest(want)})
	if err != nil {
		return nil, false, err
	}
	if written == digest(want) && cfg.Annotations[podWebhooksAnnotation] == string(b) {
		return cfg, false, nil
	}
	out := cfg.DeepCopy()
	out.Webhooks = append(others, want...)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[podWebhooksAnnotation] = string(b)
	return out, true, nil
}
