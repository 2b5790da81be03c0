package policy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// CanonicalImage matches image references that are already in the form
// images.Normalize gives them, and valid: an explicit registry host, a
// lower-case path, a tag or a digest. Docker Hub's aliases and its
// one-segment library images are left out, as normalising rewrites them.
// It is stricter than the reference grammar, so an image it matches is
// one Mutate neither rewrites for its form nor refuses as invalid.
const CanonicalImage = `^(?:localhost(?::[0-9]+)?|[a-z0-9]+(?:-[a-z0-9]+)*(?:\.[a-z0-9]+(?:-[a-z0-9]+)*)+(?::[0-9]+)?|[a-z0-9]+(?:-[a-z0-9]+)*:[0-9]+)` +
	`/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$`

// CallCondition is a CEL expression, for a mutating webhook's
// matchConditions, over a sandbox Pod being created (object): it is false
// only when Mutate under the set would neither change nor refuse the Pod
// and the webhook has nothing else to add, so the API server need not
// call the webhook at all. A Pod from a template the webhook mutated is
// such a Pod, and skipping the call is most of the webhook's cost to the
// API server. The expression errs toward calling: whatever it cannot
// judge — images not in canonical form, an owner to look a run id up on,
// node-cache affinity, conflicting policies — it leaves to the webhook.
// It is "true" (always call) when no Pod could be judged.
func CallCondition(set Set) string {
	if len(set) == 0 {
		return "false"
	}
	if _, ok := set.NodeCacheWeight(); ok {
		return "true"
	}
	runtimeClass, d1 := set.single("spec.runtimeClassName", func(s v1alpha1.SandboxPolicySpec) string { return s.RuntimeClassName })
	scheduler, d2 := set.single("spec.schedulerName", func(s v1alpha1.SandboxPolicySpec) string { return s.SchedulerName })
	if d1 != nil || d2 != nil {
		return "true"
	}
	var pod, container []string
	allowToken, allowHostNamespaces, allowHostPath, allowPrivileged := true, true, true, true
	allowedCaps := map[corev1.Capability]int{}
	for _, p := range set {
		sec := security(p)
		allowToken = allowToken && sec.AllowServiceAccountToken
		allowHostNamespaces = allowHostNamespaces && sec.AllowHostNamespaces
		allowHostPath = allowHostPath && sec.AllowHostPath
		allowPrivileged = allowPrivileged && sec.AllowPrivileged
		for _, c := range sec.AllowedCapabilities {
			allowedCaps[c]++
		}
		// Check refuses a runtime class other than any policy's.
		if want := p.Spec.RuntimeClassName; want != "" && want != runtimeClass.value {
			return "true"
		}
		if p.Spec.Images != nil && len(p.Spec.Images.AllowedRegistries) > 0 {
			var within []string
			for _, r := range p.Spec.Images.AllowedRegistries {
				within = append(within, under(image, strings.TrimSuffix(r, "/")))
			}
			container = append(container, "("+strings.Join(within, " || ")+")")
		}
	}

	if !allowToken {
		pod = append(pod, "object.spec.?automountServiceAccountToken.orValue(true) == false")
	}
	pod = append(pod, "!object.spec.?shareProcessNamespace.orValue(false)",
		"object.spec.?securityContext.?seccompProfile.hasValue()")
	if !allowHostNamespaces {
		pod = append(pod, "!object.spec.?hostNetwork.orValue(false)", "!object.spec.?hostPID.orValue(false)", "!object.spec.?hostIPC.orValue(false)")
	}
	if !allowHostPath {
		pod = append(pod, list("object.spec.?volumes")+".all(v, !has(v.hostPath))")
	}
	if runtimeClass.value != "" {
		pod = append(pod, "object.spec.?runtimeClassName.orValue('') == "+quote(runtimeClass.value))
	}
	if scheduler.value != "" {
		pod = append(pod, fmt.Sprintf("!(object.spec.?schedulerName.orValue('') in ['', %s] && object.spec.?schedulerName.orValue('') != %s)",
			quote(corev1.DefaultSchedulerName), quote(scheduler.value)))
	}
	if set.Colocates() {
		label := func(key string) string { return fmt.Sprintf("object.metadata.?labels[?%s].orValue('')", quote(key)) }
		term := func(key string) string {
			return fmt.Sprintf(list("object.spec.?affinity.?podAffinity.?preferredDuringSchedulingIgnoredDuringExecution")+".exists(t, "+
				"t.?podAffinityTerm.?topologyKey.orValue('') == %s && t.?podAffinityTerm.?labelSelector.?matchLabels[?%s].orValue('') == %s)",
				quote(corev1.LabelHostname), quote(key), label(key))
		}
		pod = append(pod, fmt.Sprintf("(%s != '' ? %s : (%s == '' || %s))",
			label(ColocateLabel), term(ColocateLabel), label(TemplateRefHashLabel), term(TemplateRefHashLabel)))
	}
	// The run id is looked up on the Pod's Sandbox and its owner, which
	// CEL cannot read.
	pod = append(pod, fmt.Sprintf("(object.metadata.?labels[?%s].orValue('') != '' || "+
		"!"+list("object.metadata.?ownerReferences")+".exists(o, o.?controller.orValue(false) && o.?kind.orValue('') == 'Sandbox'))", quote(fleetlabels.RunID)))

	// Every image is checked: one that is not valid is refused, one that
	// a rule matches is rewritten.
	container = append(container, image+".matches("+quote(CanonicalImage)+")",
		fmt.Sprintf("!%s.startsWith('index.docker.io/') && !%s.startsWith('registry-1.docker.io/') && (!%s.startsWith('docker.io/') || %s.matches('^docker[.]io/[^/]+/'))", image, image, image, image))
	for _, r := range set.rules() {
		from := r.From
		if !strings.Contains(from, "/") && !strings.ContainsAny(from, ".:") && from != "localhost" {
			from = "docker.io/" + from
		}
		container = append(container, "!"+under(image, from))
	}
	if !allowPrivileged {
		container = append(container, "!c.?securityContext.?privileged.orValue(false)")
	}
	container = append(container,
		"(c.?securityContext.?privileged.orValue(false) || c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false)",
		list("c.?securityContext.?capabilities.?drop")+".exists(d, d == 'ALL')")
	// Each policy allows its own capabilities: a container may add those
	// every policy allows.
	var allowed []string
	for _, c := range slices.Sorted(maps.Keys(allowedCaps)) {
		if allowedCaps[c] == len(set) {
			allowed = append(allowed, quote(string(c)))
		}
	}
	container = append(container, list("c.?securityContext.?capabilities.?add")+".all(a, a in ["+strings.Join(allowed, ", ")+"])")
	caps := maxLimits(set)
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		limit := caps[name]
		r, q := quote(string(name)), quote(limit.String())
		container = append(container,
			fmt.Sprintf("c.?resources.?limits[?%s].hasValue() && quantity(c.resources.limits[%s]).compareTo(quantity(%s)) <= 0", r, r, q),
			fmt.Sprintf("(!c.?resources.?requests[?%s].hasValue() || quantity(c.resources.requests[%s]).compareTo(quantity(%s)) <= 0)", r, r, q))
	}
	pod = append(pod, "("+list("object.spec.?initContainers")+" + "+list("object.spec.?containers")+").all(c, "+strings.Join(container, " && ")+")")
	return "!(" + strings.Join(pod, " && ") + ")"
}

// image is CEL for the image of the container c.
const image = "c.?image.orValue('')"

// list is CEL for the list at the optional path, empty when it is
// missing or null (as an unset slice is in a Pod's unstructured form).
func list(path string) string {
	return fmt.Sprintf("(%s.orValue([]) == null ? [] : %s.orValue([]))", path, path)
}

// under is CEL for the string s lying under prefix at a path, tag or
// digest boundary, as images.Within judges a normalised reference.
func under(s, prefix string) string {
	return fmt.Sprintf("(%s.startsWith(%s) || %s.startsWith(%s) || %s.startsWith(%s))", s, quote(prefix+"/"), s, quote(prefix+":"), s, quote(prefix+"@"))
}

// quote is a CEL string literal of s: Go's quoting, whose escapes CEL
// reads alike.
func quote(s string) string { return strconv.Quote(s) }
