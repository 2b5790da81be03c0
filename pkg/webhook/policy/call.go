package policy

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// CanonicalImage matches valid image references with an explicit
// registry host, a lower-case path and a tag or a digest: stricter than
// the reference grammar, so Mutate never refuses one as invalid. Apart
// from dockerHubShortForms, each is already in the form images.Normalize
// gives it.
const CanonicalImage = `^(?:localhost(?::[0-9]+)?|[a-z0-9]+(?:-[a-z0-9]+)*(?:\.[a-z0-9]+(?:-[a-z0-9]+)*)+(?::[0-9]+)?|[a-z0-9]+(?:-[a-z0-9]+)*:[0-9]+)` +
	`/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$`

// dockerHubShortForms are the canonical-looking references Normalize
// still changes: Docker Hub's aliases and its one-segment library images.
const dockerHubShortForms = `index\.docker\.io/|registry-1\.docker\.io/|docker\.io/[^/]*$`

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
	// The checks of the Pod, of each container c, and of each container's
	// image i.
	var pod, container, image []string
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
				within = append(within, strings.TrimSuffix(r, "/"))
			}
			image = append(image, "i.matches("+quote(under(within))+")")
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
	// Normalize would change or a rule matches is rewritten.
	rewritten := []string{dockerHubShortForms}
	var froms []string
	for _, r := range set.rules() {
		from := r.From
		if !strings.Contains(from, "/") && !strings.ContainsAny(from, ".:") && from != "localhost" {
			from = "docker.io/" + from
		}
		froms = append(froms, from)
	}
	if len(froms) > 0 {
		rewritten = append(rewritten, strings.TrimPrefix(under(froms), "^"))
	}
	image = append(image, "i.matches("+quote(CanonicalImage)+")", "!i.matches("+quote("^(?:"+strings.Join(rewritten, "|")+")")+")")
	// A list of one binds the image to i, read once for all its checks.
	container = append(container, "[c.?image.orValue('')].all(i, "+strings.Join(image, " && ")+")")
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
		// A limit Mutate set is the cap as written: equal strings spare
		// the two quantity parses.
		container = append(container,
			fmt.Sprintf("(c.?resources.?limits[?%s].orValue('') == %s || c.?resources.?limits[?%s].hasValue() && quantity(c.resources.limits[%s]).compareTo(quantity(%s)) <= 0)", r, q, r, r, q),
			fmt.Sprintf("(!c.?resources.?requests[?%s].hasValue() || quantity(c.resources.requests[%s]).compareTo(quantity(%s)) <= 0)", r, r, q))
	}
	containers := "(object.spec.?containers.orValue([]) == null ? [] : object.spec.containers)"
	pod = append(pod, "("+list("object.spec.?initContainers")+" + "+containers+").all(c, "+strings.Join(container, " && ")+")")
	return "!(" + strings.Join(pod, " && ") + ")"
}

// list is CEL for the list at the optional path, empty when it is
// missing. Lists the API omits when empty are never null; containers,
// which it does not omit, is guarded where it is read.
func list(path string) string { return path + ".orValue([])" }

// under is a regular expression for a normalised reference lying under
// one of prefixes at a path, tag or digest boundary, as images.Within
// judges it.
func under(prefixes []string) string {
	quoted := make([]string, len(prefixes))
	for i, p := range prefixes {
		quoted[i] = regexp.QuoteMeta(p)
	}
	return "^(?:" + strings.Join(quoted, "|") + ")[/:@]"
}

// quote is a CEL string literal of s: Go's quoting, whose escapes CEL
// reads alike.
func quote(s string) string { return strconv.Quote(s) }
