package webhook

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// SandboxPodLabel is on every Pod the Agent Sandbox controller creates,
// and only on those: the webhook configurations' objectSelector keys on
// it, so no other Pod ever reaches the webhook — and a governed Pod may
// not lose it (MutateUpdate).
const SandboxPodLabel = "agents.x-k8s.io/sandbox-name-hash"

// TemplateRefHashLabel is the label the Agent Sandbox controller puts on
// the Pods of a template's sandboxes; colocation keeps Pods sharing its
// value together.
const TemplateRefHashLabel = "agents.x-k8s.io/sandbox-template-ref-hash"

// ColocateLabel is what the webhook puts on a SandboxTemplate's Pod
// template when a policy asks for colocation, with the term keyed on it:
// the template's Pods then carry their colocation from creation and need
// no patch. Colocation keys on it where a Pod has it, else on
// TemplateRefHashLabel.
const ColocateLabel = "sandbox-fleet.io/colocate"

// ColocateValue is ColocateLabel's value for the template named name: the
// name, or where it is longer than a label value may be, its start and a
// digest of it.
func ColocateValue(name string) string {
	if len(name) <= validation.LabelValueMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:52], "-.") + "-" + hex.EncodeToString(sum[:5])
}

// Set is the policies governing one namespace, highest priority first,
// then by name: the order they merge in.
type Set []v1alpha1.SandboxPolicy

// Select picks from all the policies whose namespace selector matches a
// namespace's labels, in merge order.
func Select(all []v1alpha1.SandboxPolicy, namespaceLabels map[string]string) (Set, error) {
	var out Set
	for _, p := range all {
		sel := labels.Everything()
		if p.Spec.NamespaceSelector != nil {
			var err error
			if sel, err = metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector); err != nil {
				return nil, fmt.Errorf("SandboxPolicy %q: spec.namespaceSelector: %w", p.Name, err)
			}
		}
		if sel.Matches(labels.Set(namespaceLabels)) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.SandboxPolicy) int {
		return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// Denial is a policy's refusal of a Pod or template.
type Denial struct {
	// Policies names the refusing SandboxPolicy; two for a conflict.
	Policies []string
	// Field is the path of what is refused, e.g. spec.hostNetwork.
	Field  string
	Reason string
}

func (d *Denial) Error() string {
	quoted := make([]string, len(d.Policies))
	for i, p := range d.Policies {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf("denied by SandboxPolicy %s: %s: %s", strings.Join(quoted, " and "), d.Field, d.Reason)
}

// valueFrom is a single-valued setting and the policy it comes from.
type valueFrom struct {
	value, policy string
}

// single resolves a single-valued field over the set: the highest priority
// that sets it wins; two policies of that priority setting it differently
// conflict.
func (s Set) single(field string, get func(v1alpha1.SandboxPolicySpec) string) (valueFrom, *Denial) {
	var won valueFrom
	var priority int32
	for _, p := range s {
		v := get(p.Spec)
		if v == "" {
			continue
		}
		if won.policy == "" {
			won, priority = valueFrom{v, p.Name}, p.Spec.Priority
			continue
		}
		if p.Spec.Priority == priority && v != won.value {
			return valueFrom{}, &Denial{Policies: []string{won.policy, p.Name}, Field: field,
				Reason: fmt.Sprintf("the policies conflict (%q against %q at the same priority %d); give one a higher spec.priority", won.value, v, priority)}
		}
	}
	return won, nil
}

// rules are the set's rewrite rules, highest priority first.
func (s Set) rules() []images.Rule {
	var out []images.Rule
	for _, p := range s {
		if p.Spec.Images != nil {
			for _, r := range p.Spec.Images.Rewrite {
				out = append(out, images.Rule{From: images.Prefix(r.From), To: strings.TrimSuffix(r.To, "/")})
			}
		}
	}
	return out
}

func security(p v1alpha1.SandboxPolicy) v1alpha1.SecurityPolicy {
	if p.Spec.Security == nil {
		return v1alpha1.SecurityPolicy{}
	}
	return *p.Spec.Security
}

// AllowsRegistryOf reports whether image is within the allowed registries
// of every policy of the set that lists some, and some policy lists them:
// the registries the webhook may read from for it. A set that allows any
// registry names none the webhook may trust a tenant's image to.
func (s Set) AllowsRegistryOf(image string) bool {
	listed := false
	for _, p := range s {
		if p.Spec.Images == nil || len(p.Spec.Images.AllowedRegistries) == 0 {
			continue
		}
		listed = true
		if !images.WithinAny(image, p.Spec.Images.AllowedRegistries) {
			return false
		}
	}
	return listed
}

// names are the names of the set's policies, in merge order.
func (s Set) names() []string {
	out := make([]string, len(s))
	for i, p := range s {
		out[i] = p.Name
	}
	return out
}

// maxLimits is the strictest cap of each resource over the set.
func maxLimits(set Set) corev1.ResourceList {
	caps := corev1.ResourceList{}
	for _, p := range set {
		for name, limit := range p.Spec.MaxLimits {
			if have, ok := caps[name]; !ok || limit.Cmp(have) < 0 {
				caps[name] = limit
			}
		}
	}
	return caps
}

// Colocates reports whether a policy of the set asks for colocation.
func (s Set) Colocates() bool {
	_, ok := colocationWeight(s)
	return ok
}

// colocationWeight is the weight of the highest-priority policy asking for
// colocation.
func colocationWeight(set Set) (int32, bool) {
	for _, p := range set {
		if c := p.Spec.Colocation; c != nil {
			return cmp.Or(c.Weight, 100), true
		}
	}
	return 0, false
}

// NodeCacheWeight is the weight of the highest-priority policy asking to
// prefer the nodes that hold a Pod's image.
func (s Set) NodeCacheWeight() (int32, bool) {
	for _, p := range s {
		if c := p.Spec.NodeCache; c != nil {
			return cmp.Or(c.Weight, 50), true
		}
	}
	return 0, false
}
