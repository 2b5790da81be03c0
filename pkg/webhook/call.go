package webhook

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// CanonicalImage matches valid image references with an explicit
// registry host, a lower-case path and a tag or a digest: stricter than
// the reference grammar, so Mutate never refuses one as invalid. Apart
// from DockerHubShortForms, each is already in the form images.Normalize
// gives it.
const CanonicalImage = `^(?:` + canonicalHost + `)/` + canonicalComponent + `(?:/` + canonicalComponent + `)*` + canonicalTagOrDigest + `$`

// The parts of CanonicalImage: a registry host, a path component, and
// the tag or digest that ends a reference.
const (
	canonicalHost        = `localhost(?::[0-9]+)?|[a-z0-9]+(?:-[a-z0-9]+)*(?:\.[a-z0-9]+(?:-[a-z0-9]+)*)+(?::[0-9]+)?|[a-z0-9]+(?:-[a-z0-9]+)*:[0-9]+`
	canonicalComponent   = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
	canonicalTagOrDigest = `(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})`
)

var (
	canonicalRegistry   = regexp.MustCompile(`^(?:` + canonicalHost + `)$`)
	canonicalRepository = regexp.MustCompile(`^(?:` + canonicalHost + `)(?:/` + canonicalComponent + `)+$`)
)

// DockerHubShortForms are the canonical-looking references Normalize
// still changes: Docker Hub's aliases and its one-segment library images.
const DockerHubShortForms = `index\.docker\.io/|registry-1\.docker\.io/|docker\.io/[^/]*$`

// UpdateConditionName names UpdateCondition among a sandbox Pod entry's
// matchConditions.
const UpdateConditionName = "pod-update-needs-sandbox-policy"

// UpdateCondition is a CEL expression, for the sandbox Pod webhook's
// matchConditions whatever the policies, that sends an update of a Pod
// itself (not of a subresource) only when it changes what MutateUpdate
// judges: a container's image, the sandbox label (taken away, or added
// to a Pod the webhook never saw as a sandbox), or its tolerations (which
// an update may only add to). The API server lets
// an update change little else of a Pod, and nothing else the policies
// constrain (AppArmor annotations are immutable), so the controllers'
// label and annotation updates are not sent — and not refused while the
// webhook is down. Creations and subresources are always sent.
var UpdateCondition = "request.operation != 'UPDATE' || request.?subResource.orValue('') != '' || " +
	fmt.Sprintf("!object.metadata.?labels[?%s].hasValue() || !oldObject.metadata.?labels[?%s].hasValue() || ", quote(SandboxPodLabel), quote(SandboxPodLabel)) +
	"object.spec.containers.map(c, c.image) != oldObject.spec.containers.map(c, c.image) || " +
	"object.spec.?initContainers.orValue([]).map(c, c.image) != oldObject.spec.?initContainers.orValue([]).map(c, c.image) || " +
	"size(object.spec.?tolerations.orValue([])) != size(oldObject.spec.?tolerations.orValue([]))"

// CallCondition is a CEL expression, for a mutating webhook's
// matchConditions, over a sandbox Pod being created (object): it is false
// only when Mutate under the set would neither change nor refuse the Pod
// and the webhook has nothing else to add, so the API server need not
// call the webhook at all. A Pod from a template the webhook mutated is
// such a Pod, and skipping the call is most of the webhook's cost to the
// API server. The expression errs toward calling: whatever it cannot
// judge — images not in canonical form, an owner to look a run id up on,
// node-cache affinity, network isolation (the webhook checks the
// namespace's NetworkPolicy), conflicting policies — it leaves to the
// webhook.
// It is "true" (always call) when no Pod could be judged.
func CallCondition(set Set) string {
	if len(set) == 0 {
		return "false"
	}
	a, ok := allowancesOf(set)
	if !ok {
		return "true"
	}
	var c conditions
	c.security(set, a)
	c.placement(set, a)
	c.identity()
	c.images(set, a.registries)
	c.privilege(set, a)
	c.limits(set)
	return c.expression()
}

// allowances are what every policy of a set allows — a Pod must satisfy
// them all — and the single-valued settings the set resolves to.
type allowances struct {
	token, hostNamespaces, hostPath, privileged, unconfined, hostPorts bool
	// capabilities counts the policies allowing each capability, and
	// volumeTypes each volume type.
	capabilities map[corev1.Capability]int
	volumeTypes  map[string]int
	// tolerationKeys and schedulers count the policies allowing each.
	tolerationKeys, schedulers map[string]int
	// registries are the allowed registries of each policy naming some.
	registries              [][]string
	runtimeClass, scheduler string
}

// allowancesOf merges set's allowances; false when a Pod could not be
// judged by a condition (node-cache affinity, policies that conflict).
func allowancesOf(set Set) (allowances, bool) {
	if _, ok := set.NodeCacheWeight(); ok {
		return allowances{}, false
	}
	// The webhook checks a fenced namespace's NetworkPolicy is up before
	// any of its sandbox Pods starts: no condition can see it.
	if slices.ContainsFunc(set, func(p v1alpha1.SandboxPolicy) bool { return p.Spec.Network != nil }) {
		return allowances{}, false
	}
	runtimeClass, d1 := set.single("spec.runtimeClassName", func(s v1alpha1.SandboxPolicySpec) string { return s.RuntimeClassName })
	scheduler, d2 := set.single("spec.schedulerName", func(s v1alpha1.SandboxPolicySpec) string { return s.SchedulerName })
	if d1 != nil || d2 != nil {
		return allowances{}, false
	}
	a := allowances{token: true, hostNamespaces: true, hostPath: true, privileged: true, unconfined: true, hostPorts: true,
		capabilities: map[corev1.Capability]int{}, volumeTypes: map[string]int{}, tolerationKeys: map[string]int{}, schedulers: map[string]int{},
		runtimeClass: runtimeClass.value, scheduler: scheduler.value}
	for _, p := range set {
		sec := security(p)
		a.token = a.token && sec.AllowServiceAccountToken
		a.hostNamespaces = a.hostNamespaces && sec.AllowHostNamespaces
		a.hostPath = a.hostPath && sec.AllowHostPath
		a.privileged = a.privileged && sec.AllowPrivileged
		a.unconfined = a.unconfined && sec.AllowUnconfined
		a.hostPorts = a.hostPorts && sec.AllowHostPorts
		for _, c := range sec.AllowedCapabilities {
			a.capabilities[c]++
		}
		for _, t := range sec.AllowedVolumeTypes {
			a.volumeTypes[t]++
		}
		for _, k := range sec.AllowedTolerationKeys {
			a.tolerationKeys[k]++
		}
		for _, n := range sec.AllowedSchedulerNames {
			a.schedulers[n]++
		}
		// Check refuses a runtime class other than any policy's.
		if want := p.Spec.RuntimeClassName; want != "" && want != a.runtimeClass {
			return allowances{}, false
		}
		if p.Spec.Images != nil && len(p.Spec.Images.AllowedRegistries) > 0 {
			var within []string
			for _, r := range p.Spec.Images.AllowedRegistries {
				within = append(within, images.Prefix(r))
			}
			a.registries = append(a.registries, within)
		}
	}
	return a, true
}

// conditions are the checks a compliant Pod passes: of the Pod, of each
// of its containers c, and of each container but the ephemeral ones
// (limits).
type conditions struct {
	pod, container, limited []string
}

// podContainers is CEL for the Pod's containers, a list even where the
// object has them null.
const podContainers = "(object.spec.?containers.orValue([]) == null ? [] : object.spec.containers)"

// expression is true when a check fails: the Pod needs the webhook.
func (c *conditions) expression() string {
	containers := podContainers
	pod := append(slices.Clone(c.pod), "("+list("object.spec.?initContainers")+" + "+containers+" + "+list("object.spec.?ephemeralContainers")+").all(c, "+strings.Join(c.container, " && ")+")")
	if len(c.limited) > 0 {
		pod = append(pod, "("+list("object.spec.?initContainers")+" + "+containers+").all(c, "+strings.Join(c.limited, " && ")+")")
	}
	return "!(" + strings.Join(pod, " && ") + ")"
}

// security adds the checks of what Check refuses and the security
// defaults Mutate sets.
func (c *conditions) security(set Set, a allowances) {
	if !a.token {
		c.pod = append(c.pod, "object.spec.?automountServiceAccountToken.orValue(true) == false",
			"object.spec.?serviceAccountName.orValue('') in ['', 'default']",
			list("object.spec.?volumes")+".all(v, !has(v.projected) || "+list("v.projected.?sources")+".all(s, !has(s.serviceAccountToken)))")
	}
	if !a.privileged {
		c.pod = append(c.pod, "!object.spec.?securityContext.?windowsOptions.?hostProcess.orValue(false)")
		c.container = append(c.container, "!c.?securityContext.?windowsOptions.?hostProcess.orValue(false)")
	}
	if set.requiresNonRoot() {
		c.pod = append(c.pod, "object.spec.?securityContext.?runAsNonRoot.orValue(false)", "object.spec.?securityContext.?runAsUser.orValue(1) != 0")
		c.container = append(c.container, "c.?securityContext.?runAsNonRoot.orValue(true)", "c.?securityContext.?runAsUser.orValue(1) != 0")
	}
	c.pod = append(c.pod, sysctlChecks(set)...)
	c.pod = append(c.pod, "!object.spec.?shareProcessNamespace.orValue(false)",
		"object.spec.?securityContext.?seccompProfile.hasValue()")
	if !a.hostNamespaces {
		c.pod = append(c.pod, "!object.spec.?hostNetwork.orValue(false)", "!object.spec.?hostPID.orValue(false)", "!object.spec.?hostIPC.orValue(false)")
	}
	if !a.hostPath {
		c.pod = append(c.pod, list("object.spec.?volumes")+".all(v, !has(v.hostPath))")
	}
	var denied []string
	for _, t := range volumeTypes {
		if !slices.Contains(nodeFreeVolumeTypes, t) && a.volumeTypes[t] < len(set) {
			denied = append(denied, "!has(v."+t+")")
		}
	}
	c.pod = append(c.pod, list("object.spec.?volumes")+".all(v, "+strings.Join(denied, " && ")+")")
	// The scheduler binds a Pod by its binding, so only a creation may
	// name a node.
	c.pod = append(c.pod, "(request.operation != 'CREATE' || object.spec.?nodeName.orValue('') == '')",
		"!(object.spec.?priorityClassName.orValue('') in ["+strings.Join(quoteAll(systemPriorityClasses), ", ")+"])")
	if !a.unconfined {
		c.pod = append(c.pod, "object.spec.?securityContext.?seccompProfile.?type.orValue('') != 'Unconfined'",
			"object.spec.?securityContext.?appArmorProfile.?type.orValue('') != 'Unconfined'",
			fmt.Sprintf("object.metadata.?annotations.orValue({}).all(k, !k.startsWith(%s) || object.metadata.annotations[k] != 'unconfined')", quote(appArmorAnnotation)))
		c.container = append(c.container, "c.?securityContext.?seccompProfile.?type.orValue('') != 'Unconfined'",
			"c.?securityContext.?appArmorProfile.?type.orValue('') != 'Unconfined'",
			"c.?securityContext.?procMount.orValue('') != 'Unmasked'",
			"c.?securityContext.?seLinuxOptions.?type.orValue('') in "+selinuxTypes,
			"c.?securityContext.?seLinuxOptions.?user.orValue('') == ''", "c.?securityContext.?seLinuxOptions.?role.orValue('') == ''")
		c.pod = append(c.pod, "object.spec.?securityContext.?seLinuxOptions.?type.orValue('') in "+selinuxTypes,
			"object.spec.?securityContext.?seLinuxOptions.?user.orValue('') == ''", "object.spec.?securityContext.?seLinuxOptions.?role.orValue('') == ''")
	}
	if !a.hostPorts {
		c.container = append(c.container, list("c.?ports")+".all(p, p.?hostPort.orValue(0) == 0)")
	}
}

// placement adds the checks of the runtime class, scheduler and
// colocation Mutate sets.
func (c *conditions) placement(set Set, a allowances) {
	if a.runtimeClass != "" {
		c.pod = append(c.pod, "object.spec.?runtimeClassName.orValue('') == "+quote(a.runtimeClass))
	}
	if a.scheduler != "" {
		c.pod = append(c.pod, fmt.Sprintf("!(object.spec.?schedulerName.orValue('') in ['', %s] && object.spec.?schedulerName.orValue('') != %s)",
			quote(corev1.DefaultSchedulerName), quote(a.scheduler)))
	}
	// Only a scheduler and tolerations every policy allows (checkPlacement).
	schedulers := []string{"", corev1.DefaultSchedulerName}
	if a.scheduler != "" {
		schedulers = append(schedulers, a.scheduler)
	}
	c.pod = append(c.pod, fmt.Sprintf("object.spec.?schedulerName.orValue('') in [%s]", strings.Join(quoteAll(append(schedulers, allowedByAll(a.schedulers, len(set))...)), ", ")))
	keys := allowedByAll(a.tolerationKeys, len(set))
	eviction := fmt.Sprintf("t.?key.orValue('') in [%s] && t.?effect.orValue('') == %s", strings.Join(quoteAll(evictionTolerations), ", "), quote(string(corev1.TaintEffectNoExecute)))
	if len(keys) > 0 {
		eviction = fmt.Sprintf("t.?key.orValue('') in [%s] || %s", strings.Join(quoteAll(keys), ", "), eviction)
	}
	c.pod = append(c.pod, list("object.spec.?tolerations")+".all(t, "+eviction+")")
	if set.Colocates() {
		label := func(key string) string { return fmt.Sprintf("object.metadata.?labels[?%s].orValue('')", quote(key)) }
		term := func(key string) string {
			return fmt.Sprintf(list("object.spec.?affinity.?podAffinity.?preferredDuringSchedulingIgnoredDuringExecution")+".exists(t, "+
				"t.?podAffinityTerm.?topologyKey.orValue('') == %s && t.?podAffinityTerm.?labelSelector.?matchLabels[?%s].orValue('') == %s)",
				quote(corev1.LabelHostname), quote(key), label(key))
		}
		c.pod = append(c.pod, fmt.Sprintf("(%s != '' ? %s : (%s == '' || %s))",
			label(ColocateLabel), term(ColocateLabel), label(TemplateRefHashLabel), term(TemplateRefHashLabel)))
	}
}

// allowedByAll are the names counts has for every one of n policies, but
// the empty name, which allows nothing (tolerationAllowed).
func allowedByAll(counts map[string]int, n int) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if k != "" && counts[k] == n {
			out = append(out, k)
		}
	}
	return out
}

// identity adds the checks of the labels: an update may not take the
// sandbox label away (MutateUpdate), and the run id is looked up on the
// Pod's Sandbox and its owner, which CEL cannot read.
func (c *conditions) identity() {
	c.pod = append(c.pod, fmt.Sprintf("(request.operation != 'UPDATE' || !oldObject.metadata.?labels[?%s].hasValue() || object.metadata.?labels[?%s].hasValue())",
		quote(SandboxPodLabel), quote(SandboxPodLabel)))
	c.pod = append(c.pod, fmt.Sprintf("(object.metadata.?labels[?%s].orValue('') != '' || "+
		"!"+list("object.metadata.?ownerReferences")+".exists(o, o.?controller.orValue(false) && o.?kind.orValue('') == 'Sandbox'))", quote(fleetlabels.RunID)))
}

// images adds the checks of every image, a container's or an image
// volume's: one that is not valid is refused, one that Normalize would
// change or a rule matches is rewritten.
func (c *conditions) images(set Set, allowed [][]string) {
	var froms []string
	for _, r := range set.rules() {
		froms = append(froms, r.Source())
	}
	image := imageChecks(allowed, froms)
	c.container = append(c.container, allCEL(image, "c.?image.orValue('')"))
	c.pod = append(c.pod, list("object.spec.?volumes")+".all(v, !has(v.image) || "+allCEL(image, "v.image.?reference.orValue('')")+")")
}

// privilege adds the checks of privilege and capabilities. Mutate
// forbids privilege escalation to all but privileged containers, and
// those only where privilege is allowed; each policy allows its own
// capabilities, so a container may add those every policy allows.
func (c *conditions) privilege(set Set, a allowances) {
	if a.privileged {
		c.container = append(c.container, "(c.?securityContext.?privileged.orValue(false) || c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false)")
	} else {
		c.container = append(c.container, "!c.?securityContext.?privileged.orValue(false)", "c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false")
	}
	c.container = append(c.container, "'ALL' in "+list("c.?securityContext.?capabilities.?drop"))
	var addable []string
	for _, cap := range slices.Sorted(maps.Keys(a.capabilities)) {
		if a.capabilities[cap] == len(set) {
			addable = append(addable, quote(string(cap)))
		}
	}
	if len(addable) == 0 {
		c.container = append(c.container, list("c.?securityContext.?capabilities.?add")+".size() == 0")
	} else {
		c.container = append(c.container, list("c.?securityContext.?capabilities.?add")+".all(a, a in ["+strings.Join(addable, ", ")+"])")
	}
}

// limits adds the checks of the caps on limits and requests.
func (c *conditions) limits(set Set) {
	caps := maxLimits(set)
	// A cap bounds the whole Pod too: that of several containers, or of
	// a pod-level limit, is summed by the webhook (checkPodTotal).
	if len(caps) > 0 {
		c.pod = append(c.pod, "size("+list("object.spec.?initContainers")+") + size("+podContainers+") <= 1",
			"!object.spec.?resources.hasValue()")
	}
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		limit := caps[name]
		r, q := quote(string(name)), quote(limit.String())
		// A limit Mutate set is the cap as written: equal strings spare
		// the two quantity parses. Ephemeral containers, which the API
		// lets set no resources, get none, so only the others are held
		// to a limit.
		c.limited = append(c.limited,
			fmt.Sprintf("(c.?resources.?limits[?%s].orValue('') == %s || c.?resources.?limits[?%s].hasValue() && quantity(c.resources.limits[%s]).compareTo(quantity(%s)) <= 0)", r, q, r, r, q))
		c.container = append(c.container,
			fmt.Sprintf("(!c.?resources.?requests[?%s].hasValue() || quantity(c.resources.requests[%s]).compareTo(quantity(%s)) <= 0)", r, r, q))
	}
}

// selinuxTypes is containerSELinuxTypes as a CEL list.
var selinuxTypes = "[" + strings.Join(quoteAll(containerSELinuxTypes), ", ") + "]"

// sysctlChecks are the checks that every sysctl of the Pod is one each
// policy allows: safe, named, or under a prefix it names. A name in the
// kubelet's other spelling (net/ipv4/...) is left to the webhook.
func sysctlChecks(set Set) []string {
	var checks []string
	seen := map[string]bool{}
	for _, p := range set {
		allowed := append(slices.Clone(safeSysctls), security(p).AllowedSysctls...)
		var names, prefixes []string
		for _, a := range allowed {
			if prefix, ok := strings.CutSuffix(a, "*"); ok {
				prefixes = append(prefixes, "s.name.startsWith("+quote(prefix)+")")
			} else {
				names = append(names, quote(a))
			}
		}
		check := list("object.spec.?securityContext.?sysctls") + ".all(s, " + strings.Join(append([]string{"s.name in [" + strings.Join(names, ", ") + "]"}, prefixes...), " || ") + ")"
		if !seen[check] {
			seen[check] = true
			checks = append(checks, check)
		}
	}
	return checks
}

// allCEL is CEL for image, a string expression, passing all checks; with
// more than one, a list of one binds it to i, read once for them all.
func allCEL(checks []imageCheck, image string) string {
	if len(checks) == 1 {
		return checks[0].cel(image)
	}
	var cel []string
	for _, c := range checks {
		cel = append(cel, c.cel("i"))
	}
	return "[" + image + "].all(i, " + strings.Join(cel, " && ") + ")"
}

// imageCheck is a regular expression an image must match, or not.
type imageCheck struct {
	pattern string
	match   bool
}

// cel is the check as CEL of the string image.
func (c imageCheck) cel(image string) string {
	not := "!"
	if c.match {
		not = ""
	}
	return not + image + ".matches(" + quote(c.pattern) + ")"
}

// dockerHubPrefixes are the literal prefixes of DockerHubShortForms.
var dockerHubPrefixes = []string{"index.docker.io/", "registry-1.docker.io/", "docker.io/"}

// imageChecks are the checks that an image is valid, in the form
// Normalize gives it, within each of the allowed lists and under none of
// the rewrite rules' sources (froms). Each is a scan of every image of
// every Pod, so they fold into as few as they can: an image that is one
// of the first list's prefixes, itself canonical, followed by a canonical
// rest is canonical and within the list; and where no such prefix
// overlaps a source or a Docker Hub short form, no image under one is
// rewritten. Prefixes the fold cannot take are left out of it: their
// images are called for, never let through wrongly.
func imageChecks(allowed [][]string, froms []string) []imageCheck {
	rewritten := slices.Clone(dockerHubPrefixes)
	for _, f := range froms {
		rewritten = append(rewritten, f+"/", f+":", f+"@")
	}
	var registries, repositories []string
	overlaps := false
	if len(allowed) > 0 {
		for _, p := range allowed[0] {
			switch {
			case canonicalRegistry.MatchString(p):
				registries = append(registries, regexp.QuoteMeta(p))
			case canonicalRepository.MatchString(p):
				repositories = append(repositories, regexp.QuoteMeta(p))
			default:
				continue
			}
			for _, r := range rewritten {
				overlaps = overlaps || strings.HasPrefix(p, r) || strings.HasPrefix(r, p)
			}
		}
	}
	folded := len(registries)+len(repositories) > 0
	var checks []imageCheck
	if !folded {
		checks = append(checks, imageCheck{CanonicalImage, true})
	} else {
		// A registry's images have a path under it; a repository's may
		// be it, with a tag or digest.
		var alternatives []string
		if len(registries) > 0 {
			alternatives = append(alternatives, "(?:"+strings.Join(registries, "|")+")(?:/"+canonicalComponent+")+")
		}
		if len(repositories) > 0 {
			alternatives = append(alternatives, "(?:"+strings.Join(repositories, "|")+")(?:/"+canonicalComponent+")*")
		}
		checks = append(checks, imageCheck{"^(?:" + strings.Join(alternatives, "|") + ")" + canonicalTagOrDigest + "$", true})
		allowed = allowed[1:]
	}
	for _, within := range allowed {
		checks = append(checks, imageCheck{under(within), true})
	}
	if !folded || overlaps {
		sources := DockerHubShortForms
		if len(froms) > 0 {
			sources += "|" + strings.TrimPrefix(under(froms), "^")
		}
		checks = append(checks, imageCheck{"^(?:" + sources + ")", false})
	}
	return checks
}

// list is CEL for the list at the optional path, empty when it is
// missing. Lists the API omits when empty are never null; containers,
// which it does not omit, is guarded where it is read.
func list(path string) string { return path + ".orValue([])" }

// under is a regular expression for a normalised reference lying under
// one of prefixes as images.Within judges it: a registry's path, or a
// repository's path, tag or digest.
func under(prefixes []string) string {
	var registries, repositories []string
	for _, p := range prefixes {
		if images.IsRegistry(p) {
			registries = append(registries, regexp.QuoteMeta(p))
		} else {
			repositories = append(repositories, regexp.QuoteMeta(p))
		}
	}
	var alternatives []string
	if len(registries) > 0 {
		alternatives = append(alternatives, "(?:"+strings.Join(registries, "|")+")/")
	}
	if len(repositories) > 0 {
		alternatives = append(alternatives, "(?:"+strings.Join(repositories, "|")+")[/:@]")
	}
	return "^(?:" + strings.Join(alternatives, "|") + ")"
}

// quote is a CEL string literal of s: Go's quoting, whose escapes CEL
// reads alike.
func quote(s string) string { return strconv.Quote(s) }

// quoteAll quotes each of ss.
func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = quote(s)
	}
	return out
}
