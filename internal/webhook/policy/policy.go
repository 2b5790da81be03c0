// Package policy decides what SandboxPolicies do to a sandbox Pod or
// template: which policies govern a namespace, in what order they merge,
// what they deny and how they change the Pod. Everything here is a pure
// function of plain objects, so the webhook's decisions are table-tested
// and fuzzed without a server.
package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
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

// container is a container of a Pod spec and its field path.
type container struct {
	c    *corev1.Container
	path string
	// ephemeral containers may set no resources.
	ephemeral bool
}

// containersOf lists spec's init, regular and ephemeral containers. An
// ephemeral container's fields are a container's (the API keeps them the
// same), so it is checked as one.
func containersOf(spec *corev1.PodSpec, at string) []container {
	var out []container
	for i := range spec.InitContainers {
		out = append(out, container{c: &spec.InitContainers[i], path: fmt.Sprintf("%s.initContainers[%d]", at, i)})
	}
	for i := range spec.Containers {
		out = append(out, container{c: &spec.Containers[i], path: fmt.Sprintf("%s.containers[%d]", at, i)})
	}
	for i := range spec.EphemeralContainers {
		out = append(out, container{c: (*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon),
			path: fmt.Sprintf("%s.ephemeralContainers[%d]", at, i), ephemeral: true})
	}
	return out
}

// imageVolume is an image volume of a Pod spec and its field path.
type imageVolume struct {
	v    *corev1.ImageVolumeSource
	path string
}

// imageVolumesOf lists spec's image volumes: images the node pulls, as
// it pulls a container's.
func imageVolumesOf(spec *corev1.PodSpec, at string) []imageVolume {
	var out []imageVolume
	for i := range spec.Volumes {
		if v := spec.Volumes[i].Image; v != nil {
			out = append(out, imageVolume{v, fmt.Sprintf("%s.volumes[%d].image.reference", at, i)})
		}
	}
	return out
}

// unconfined reports whether a seccomp or AppArmor profile is Unconfined,
// or an SELinux type not one of containerSELinuxTypes.
func unconfined(seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile, selinux *corev1.SELinuxOptions) (string, bool) {
	switch {
	case seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined:
		return "seccompProfile.type", true
	case apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined:
		return "appArmorProfile.type", true
	case selinux != nil && !slices.Contains(containerSELinuxTypes, selinux.Type):
		return "seLinuxOptions.type", true
	}
	return "", false
}

// containerSELinuxTypes are the SELinux types a container may ask for,
// as Pod Security's baseline allows them ("" is the runtime's): the
// others, spc_t above all, are not confined.
var containerSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// safeSysctls are the sysctls Pod Security's baseline allows and every
// kubelet accepts: namespaced, and unable to affect other Pods.
var safeSysctls = []string{
	"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
}

// sysctlAllowed reports whether name, in either of the kubelet's
// spellings (net.ipv4.x or net/ipv4/x), is safe or one of allowed, an
// entry ending in * allowing what it prefixes.
func sysctlAllowed(name string, allowed []string) bool {
	name = strings.ReplaceAll(name, "/", ".")
	if slices.Contains(safeSysctls, name) {
		return true
	}
	for _, a := range allowed {
		if prefix, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(name, prefix) || a == name {
			return true
		}
	}
	return false
}

// injectedTokenVolume prefixes the name of the volume the API server's
// ServiceAccount admission adds, before any webhook, to a Pod that does
// not turn automountServiceAccountToken off.
const injectedTokenVolume = "kube-api-access-"

// injectedToken reports whether v is the token volume the API server
// added: Mutate takes it out where tokens are not allowed, rather than
// refusing the Pod for it.
func injectedToken(v corev1.Volume) bool {
	return strings.HasPrefix(v.Name, injectedTokenVolume) && v.Projected != nil &&
		slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil })
}

// removeInjectedTokens takes the API server's token volumes and their
// mounts out of spec, and reports which it took: turning automounting
// off after the ServiceAccount admission ran would leave them in.
func removeInjectedTokens(spec *corev1.PodSpec) []string {
	var removed []string
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool {
		if injectedToken(v) {
			removed = append(removed, v.Name)
			return true
		}
		return false
	})
	for _, c := range containersOf(spec, "spec") {
		c.c.VolumeMounts = slices.DeleteFunc(c.c.VolumeMounts, func(m corev1.VolumeMount) bool { return slices.Contains(removed, m.Name) })
	}
	return removed
}

// tokensAllowed reports whether every policy of the set lets sandboxes
// have service account credentials.
func (s Set) tokensAllowed() bool {
	for _, p := range s {
		if !security(p).AllowServiceAccountToken {
			return false
		}
	}
	return true
}

// CheckSecret refuses a Secret of type secretType in a namespace the set
// governs when it would hand a sandbox API credentials the set does not
// allow: the token controller fills a kubernetes.io/service-account-token
// Secret with its account's token, which any Pod there may then mount as
// a secret volume — and a Pod's secret volume does not say what it holds
// (the webhook reads no Secrets), so such Secrets are refused instead.
func CheckSecret(secretType corev1.SecretType, set Set) *Denial {
	if secretType != corev1.SecretTypeServiceAccountToken {
		return nil
	}
	for _, p := range set {
		if !security(p).AllowServiceAccountToken {
			return &Denial{Policies: []string{p.Name}, Field: "type",
				Reason: "a kubernetes.io/service-account-token Secret gives whoever mounts it a service account's API credentials, and service account tokens are not allowed for sandboxes (spec.security.allowServiceAccountToken); keep such Secrets in a namespace no SandboxPolicy governs"}
		}
	}
	return nil
}

// requiresNonRoot reports whether a policy of the set makes containers
// run as a user other than root.
func (s Set) requiresNonRoot() bool {
	return slices.ContainsFunc(s, func(p v1alpha1.SandboxPolicy) bool { return security(p).RequireNonRoot })
}

// Check returns the first refusal of spec — a Pod's or a template's, at
// field path at — by the set, checking the policies in merge order. Images
// are checked as the rewrite rules will make them.
func Check(spec *corev1.PodSpec, at string, set Set) *Denial {
	if _, d := set.single(at+".runtimeClassName", func(s v1alpha1.SandboxPolicySpec) string { return s.RuntimeClassName }); d != nil {
		return d
	}
	if _, d := set.single(at+".schedulerName", func(s v1alpha1.SandboxPolicySpec) string { return s.SchedulerName }); d != nil {
		return d
	}
	rules := set.rules()
	for _, p := range set {
		deny := func(field, reason string) *Denial {
			return &Denial{Policies: []string{p.Name}, Field: field, Reason: reason}
		}
		if d := checkPod(spec, at, p, deny); d != nil {
			return d
		}
		for _, v := range imageVolumesOf(spec, at) {
			if d := checkImage(v.v.Reference, v.path, rules, p, deny); d != nil {
				return d
			}
		}
		for _, c := range containersOf(spec, at) {
			if d := checkContainer(c, p, deny); d != nil {
				return d
			}
			if d := checkImage(c.c.Image, c.path+".image", rules, p, deny); d != nil {
				return d
			}
		}
	}
	return nil
}

// checkPod refuses what the policy p denies in the Pod-wide fields of
// spec.
func checkPod(spec *corev1.PodSpec, at string, p v1alpha1.SandboxPolicy, deny func(field, reason string) *Denial) *Denial {
	sec := security(p)
	if !sec.AllowHostNamespaces {
		for _, h := range []struct {
			on    bool
			field string
		}{{spec.HostNetwork, "hostNetwork"}, {spec.HostPID, "hostPID"}, {spec.HostIPC, "hostIPC"}} {
			if h.on {
				return deny(at+"."+h.field, "host namespaces are not allowed for sandboxes (spec.security.allowHostNamespaces)")
			}
		}
	}
	for i, v := range spec.Volumes {
		if !sec.AllowHostPath && v.HostPath != nil {
			return deny(fmt.Sprintf("%s.volumes[%d].hostPath", at, i), "hostPath volumes are not allowed for sandboxes (spec.security.allowHostPath)")
		}
		if sec.AllowServiceAccountToken || v.Projected == nil || injectedToken(v) {
			continue
		}
		for j, source := range v.Projected.Sources {
			if source.ServiceAccountToken != nil {
				return deny(fmt.Sprintf("%s.volumes[%d].projected.sources[%d].serviceAccountToken", at, i, j),
					"service account tokens are not allowed for sandboxes (spec.security.allowServiceAccountToken)")
			}
		}
	}
	if name := spec.ServiceAccountName; !sec.AllowServiceAccountToken && name != "" && name != "default" {
		return deny(at+".serviceAccountName", fmt.Sprintf("sandboxes run as their namespace's default service account, not %q, unless spec.security.allowServiceAccountToken; give image pull secrets in the Pod's imagePullSecrets", name))
	}
	if want := p.Spec.RuntimeClassName; want != "" && spec.RuntimeClassName != nil && *spec.RuntimeClassName != want {
		return deny(at+".runtimeClassName", fmt.Sprintf("sandboxes must use runtime class %q, not %q", want, *spec.RuntimeClassName))
	}
	psc := spec.SecurityContext
	if psc == nil {
		return nil
	}
	if field, ok := unconfined(psc.SeccompProfile, psc.AppArmorProfile, psc.SELinuxOptions); ok && !sec.AllowUnconfined {
		return deny(at+".securityContext."+field, unconfinedReason)
	}
	if w := psc.WindowsOptions; !sec.AllowPrivileged && w != nil && w.HostProcess != nil && *w.HostProcess {
		return deny(at+".securityContext.windowsOptions.hostProcess", hostProcessReason)
	}
	if sec.RequireNonRoot {
		if psc.RunAsNonRoot != nil && !*psc.RunAsNonRoot {
			return deny(at+".securityContext.runAsNonRoot", nonRootReason)
		}
		if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
			return deny(at+".securityContext.runAsUser", nonRootReason)
		}
	}
	for i, sysctl := range psc.Sysctls {
		if !sysctlAllowed(sysctl.Name, sec.AllowedSysctls) {
			return deny(fmt.Sprintf("%s.securityContext.sysctls[%d]", at, i),
				fmt.Sprintf("sysctl %s is neither safe nor in spec.security.allowedSysctls %v", sysctl.Name, sec.AllowedSysctls))
		}
	}
	return nil
}

// checkContainer refuses what the policy p denies in a container: what
// it asks of the kernel and what it may use.
func checkContainer(c container, p v1alpha1.SandboxPolicy, deny func(field, reason string) *Denial) *Denial {
	sec := security(p)
	if !sec.AllowHostPorts {
		for i, port := range c.c.Ports {
			if port.HostPort != 0 {
				return deny(fmt.Sprintf("%s.ports[%d].hostPort", c.path, i), "host ports are not allowed for sandboxes (spec.security.allowHostPorts)")
			}
		}
	}
	if !c.ephemeral {
		for name, limit := range p.Spec.MaxLimits {
			if got, ok := c.c.Resources.Limits[name]; ok && got.Cmp(limit) > 0 {
				return deny(fmt.Sprintf("%s.resources.limits.%s", c.path, name), fmt.Sprintf("%s is above the cap of %s (spec.maxLimits)", &got, &limit))
			}
			if got, ok := c.c.Resources.Requests[name]; ok && got.Cmp(limit) > 0 {
				return deny(fmt.Sprintf("%s.resources.requests.%s", c.path, name), fmt.Sprintf("%s is above the cap of %s on limits (spec.maxLimits)", &got, &limit))
			}
		}
	}
	sc := c.c.SecurityContext
	if sc == nil {
		return nil
	}
	if !sec.AllowPrivileged && sc.Privileged != nil && *sc.Privileged {
		return deny(c.path+".securityContext.privileged", "privileged containers are not allowed for sandboxes (spec.security.allowPrivileged)")
	}
	if w := sc.WindowsOptions; !sec.AllowPrivileged && w != nil && w.HostProcess != nil && *w.HostProcess {
		return deny(c.path+".securityContext.windowsOptions.hostProcess", hostProcessReason)
	}
	if !sec.AllowUnconfined {
		if field, ok := unconfined(sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions); ok {
			return deny(c.path+".securityContext."+field, unconfinedReason)
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			return deny(c.path+".securityContext.procMount", "an unmasked /proc is not allowed for sandboxes (spec.security.allowUnconfined)")
		}
	}
	if sec.RequireNonRoot {
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot {
			return deny(c.path+".securityContext.runAsNonRoot", nonRootReason)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			return deny(c.path+".securityContext.runAsUser", nonRootReason)
		}
	}
	if sc.Capabilities != nil {
		for _, capability := range sc.Capabilities.Add {
			if !slices.Contains(sec.AllowedCapabilities, capability) {
				return deny(c.path+".securityContext.capabilities.add", fmt.Sprintf("capability %s is not in spec.security.allowedCapabilities %v", capability, sec.AllowedCapabilities))
			}
		}
	}
	return nil
}

const (
	hostProcessReason = "Windows host processes are not allowed for sandboxes (spec.security.allowPrivileged)"
	nonRootReason     = "sandboxes must not run as root (spec.security.requireNonRoot)"
)

const unconfinedReason = "the Unconfined profile is not allowed for sandboxes (spec.security.allowUnconfined)"

// appArmorAnnotation prefixes the deprecated per-container AppArmor
// annotation, which kubelets still honour where the field is unset.
const appArmorAnnotation = "container.apparmor.security.beta.kubernetes.io/"

// checkAnnotations refuses the deprecated AppArmor annotation asking for
// an unconfined container, unless every policy allows it.
func checkAnnotations(annotations map[string]string, set Set) *Denial {
	for _, key := range slices.Sorted(maps.Keys(annotations)) {
		if !strings.HasPrefix(key, appArmorAnnotation) || annotations[key] != "unconfined" {
			continue
		}
		for _, p := range set {
			if !security(p).AllowUnconfined {
				return &Denial{Policies: []string{p.Name}, Field: "metadata.annotations[" + key + "]", Reason: unconfinedReason}
			}
		}
	}
	return nil
}

// checkImage refuses ref, a container's image or an image volume's at
// field, as the rules rewrite it, unless it comes from one of p's allowed
// registries.
func checkImage(ref, field string, rules []images.Rule, p v1alpha1.SandboxPolicy, deny func(field, reason string) *Denial) *Denial {
	if p.Spec.Images == nil || len(p.Spec.Images.AllowedRegistries) == 0 {
		return nil
	}
	image, _, err := images.Rewrite(rules, ref)
	if err != nil {
		return deny(field, err.Error())
	}
	if images.WithinAny(image, p.Spec.Images.AllowedRegistries) {
		return nil
	}
	return deny(field, fmt.Sprintf("image %s is not from an allowed registry %v (spec.images.allowedRegistries)", image, p.Spec.Images.AllowedRegistries))
}

// CheckEphemeral refuses the ephemeral containers of pod that Mutate
// would refuse or change (their security defaults, a mirror for their
// image): they are added by an update that is not mutated, so each must
// come as the set would make it. The rest of the Pod was admitted when it
// was created.
func CheckEphemeral(pod *corev1.Pod, set Set, runID string) error {
	if len(set) == 0 {
		return nil
	}
	changes, err := Mutate(pod.DeepCopy(), set, runID)
	if err != nil {
		return err
	}
	var missing []string
	for _, c := range changes {
		if strings.HasPrefix(c, "spec.ephemeralContainers[") {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	field, _, _ := strings.Cut(missing[0], " ")
	return &Denial{Policies: set.names(), Field: field, Reason: "an ephemeral container must come as the policies make a container; set " + strings.Join(missing, ", ")}
}

// MutateUpdate applies the set to an update of a sandbox Pod from old to
// pod, which the API server lets change few fields once the Pod exists:
// of those the policies constrain its containers' images, so each image
// the update changes is rewritten to the mirror (its original recorded)
// and refused outside the allowed registries, as at creation; and it may
// not take the Pod out of the webhook's sight by removing
// SandboxPodLabel. It returns what it changed.
func MutateUpdate(old, pod *corev1.Pod, set Set) ([]string, error) {
	if len(set) == 0 {
		return nil, nil
	}
	if _, had := old.Labels[SandboxPodLabel]; had {
		if _, has := pod.Labels[SandboxPodLabel]; !has {
			return nil, &Denial{Policies: set.names(), Field: "metadata.labels[" + SandboxPodLabel + "]",
				Reason: "a sandbox Pod in a namespace a SandboxPolicy governs keeps the Agent Sandbox controller's label, by which the policies see it"}
		}
	}
	before := map[string]string{}
	for _, c := range containersOf(&old.Spec, "spec") {
		before[c.c.Name] = c.c.Image
	}
	rules := set.rules()
	var changes []string
	for i, c := range containersOf(&pod.Spec, "spec") {
		if image, ok := before[c.c.Name]; ok && image == c.c.Image {
			continue
		}
		for _, p := range set {
			deny := func(field, reason string) *Denial {
				return &Denial{Policies: []string{p.Name}, Field: field, Reason: reason}
			}
			if d := checkImage(c.c.Image, c.path+".image", rules, p, deny); d != nil {
				return nil, d
			}
		}
		image, ok, err := images.Rewrite(rules, c.c.Image)
		if err != nil {
			return nil, &Denial{Policies: []string{set[0].Name}, Field: c.path + ".image", Reason: err.Error()}
		}
		if !ok || image == c.c.Image {
			continue
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[containerImageKey(&pod.Spec, i)] = c.c.Image
		changes = append(changes, fmt.Sprintf("%s.image %s → %s", c.path, c.c.Image, image))
		c.c.Image = image
	}
	return changes, nil
}

// CheckResize refuses an in-place resize (pods/resize) of pod's
// containers past the set's caps: a limit above one, a request above
// one, or a capped limit taken away.
func CheckResize(pod *corev1.Pod, set Set) *Denial {
	for _, p := range set {
		deny := func(field, reason string) *Denial {
			return &Denial{Policies: []string{p.Name}, Field: field, Reason: reason}
		}
		for _, c := range containersOf(&pod.Spec, "spec") {
			if c.ephemeral {
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(p.Spec.MaxLimits)) {
				if _, ok := c.c.Resources.Limits[name]; !ok {
					limit := p.Spec.MaxLimits[name]
					return deny(fmt.Sprintf("%s.resources.limits.%s", c.path, name), fmt.Sprintf("a sandbox's limit may not be removed; the cap is %s (spec.maxLimits)", &limit))
				}
			}
			if d := checkContainer(c, p, deny); d != nil {
				return d
			}
		}
	}
	return nil
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

// Mutate applies the set to a sandbox Pod in place: it refuses what the
// policies deny, then rewrites images (recording the originals), sets the
// security defaults, the runtime class and limit caps, colocation affinity
// and the run-id label runID (found on the Pod's owners; "" for none). It
// returns what it changed, nothing when the Pod already complies — so a
// second admission changes nothing.
func Mutate(pod *corev1.Pod, set Set, runID string) ([]string, error) {
	if len(set) == 0 {
		return nil, nil
	}
	if d := Check(&pod.Spec, "spec", set); d != nil {
		return nil, d
	}
	if d := checkAnnotations(pod.Annotations, set); d != nil {
		return nil, d
	}
	var changes []string
	changed := func(format string, args ...any) { changes = append(changes, fmt.Sprintf(format, args...)) }
	if err := rewriteImages(pod, set, changed); err != nil {
		return nil, err
	}
	secureDefaults(pod, set, changed)
	placeAndCap(pod, set, changed)
	if runID != "" && pod.Labels[fleetlabels.RunID] == "" {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[fleetlabels.RunID] = runID
		changed("metadata.labels %s=%s", fleetlabels.RunID, runID)
	}
	return changes, nil
}

// rewriteImages points the Pod's containers and image volumes at the
// set's mirrors, recording each original in an annotation.
func rewriteImages(pod *corev1.Pod, set Set, changed func(string, ...any)) error {
	rules := set.rules()
	rewrite := func(ref *string, field, key string) error {
		image, ok, err := images.Rewrite(rules, *ref)
		if err != nil {
			return &Denial{Policies: []string{set[0].Name}, Field: field, Reason: err.Error()}
		}
		if !ok || image == *ref {
			return nil
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		if _, recorded := pod.Annotations[key]; !recorded {
			pod.Annotations[key] = *ref
		}
		changed("%s %s → %s", field, *ref, image)
		*ref = image
		return nil
	}
	for i, c := range containersOf(&pod.Spec, "spec") {
		if err := rewrite(&c.c.Image, c.path+".image", containerImageKey(&pod.Spec, i)); err != nil {
			return err
		}
	}
	for i, v := range imageVolumesOf(&pod.Spec, "spec") {
		if err := rewrite(&v.v.Reference, v.path, originalImageKey("volume-"+pod.Spec.Volumes[i].Name)); err != nil {
			return err
		}
	}
	return nil
}

// containerImageKey is the annotation recording the original image of
// the i-th of containersOf(spec): a Pod of one container has the plain
// key, as the fleet writes it.
func containerImageKey(spec *corev1.PodSpec, i int) string {
	if i == 0 && len(spec.InitContainers) == 0 {
		return fleetlabels.OriginalImage
	}
	return originalImageKey(containersOf(spec, "")[i].c.Name)
}

// originalImageKey is the annotation recording the original image of
// the container (or "volume-" and the volume) named name: the key's name
// part is at most a label's 63 characters, so a long name is shortened
// as ColocateValue shortens one.
func originalImageKey(name string) string {
	prefix, base, _ := strings.Cut(fleetlabels.OriginalImage, "/")
	return prefix + "/" + ColocateValue(base+"."+name)
}

// secureDefaults sets what the policies default: no token, no shared
// process namespace, the runtime's seccomp profile, a non-root user
// where required, and in every container no privilege escalation and no
// capabilities but those added.
func secureDefaults(pod *corev1.Pod, set Set, changed func(string, ...any)) {
	if !set.tokensAllowed() {
		if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
			pod.Spec.AutomountServiceAccountToken = ptr(false)
			changed("spec.automountServiceAccountToken false")
		}
		for _, name := range removeInjectedTokens(&pod.Spec) {
			changed("spec.volumes: the service account token volume %s and its mounts removed", name)
		}
	}
	if pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		pod.Spec.ShareProcessNamespace = ptr(false)
		changed("spec.shareProcessNamespace false")
	}
	if pod.Spec.SecurityContext == nil {
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if pod.Spec.SecurityContext.SeccompProfile == nil {
		pod.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
		changed("spec.securityContext.seccompProfile RuntimeDefault")
	}
	if set.requiresNonRoot() && pod.Spec.SecurityContext.RunAsNonRoot == nil {
		pod.Spec.SecurityContext.RunAsNonRoot = ptr(true)
		changed("spec.securityContext.runAsNonRoot true")
	}
	for _, c := range containersOf(&pod.Spec, "spec") {
		if c.c.SecurityContext == nil {
			c.c.SecurityContext = &corev1.SecurityContext{}
		}
		sc := c.c.SecurityContext
		privileged := sc.Privileged != nil && *sc.Privileged
		// The API refuses allowPrivilegeEscalation false on a privileged
		// container, which only a policy allowing privilege lets through.
		if !privileged && (sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation) {
			sc.AllowPrivilegeEscalation = ptr(false)
			changed("%s.securityContext.allowPrivilegeEscalation false", c.path)
		}
		if sc.Capabilities == nil {
			sc.Capabilities = &corev1.Capabilities{}
		}
		if !slices.Contains(sc.Capabilities.Drop, "ALL") {
			sc.Capabilities.Drop = append(sc.Capabilities.Drop, "ALL")
			changed("%s.securityContext.capabilities.drop ALL", c.path)
		}
	}
}

// placeAndCap sets the runtime class and scheduler the set names, caps
// every container's limits (but ephemeral containers', which the API
// lets set no resources) and prefers the node of the template's other
// sandboxes under colocation.
func placeAndCap(pod *corev1.Pod, set Set, changed func(string, ...any)) {
	runtimeClass, _ := set.single("spec.runtimeClassName", func(s v1alpha1.SandboxPolicySpec) string { return s.RuntimeClassName })
	if runtimeClass.value != "" && pod.Spec.RuntimeClassName == nil {
		pod.Spec.RuntimeClassName = ptr(runtimeClass.value)
		changed("spec.runtimeClassName %s", runtimeClass.value)
	}

	// The API server defaults an unset scheduler to the cluster's own
	// before admission; a Pod that names another keeps it.
	scheduler, _ := set.single("spec.schedulerName", func(s v1alpha1.SandboxPolicySpec) string { return s.SchedulerName })
	if scheduler.value != "" && (pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) &&
		pod.Spec.SchedulerName != scheduler.value {
		pod.Spec.SchedulerName = scheduler.value
		changed("spec.schedulerName %s", scheduler.value)
	}

	caps := maxLimits(set)
	for _, c := range containersOf(&pod.Spec, "spec") {
		if c.ephemeral {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(caps)) {
			if _, ok := c.c.Resources.Limits[name]; ok {
				continue
			}
			if c.c.Resources.Limits == nil {
				c.c.Resources.Limits = corev1.ResourceList{}
			}
			limit := caps[name]
			c.c.Resources.Limits[name] = limit.DeepCopy()
			changed("%s.resources.limits.%s %s", c.path, name, &limit)
		}
	}

	if weight, ok := colocationWeight(set); ok {
		key := ColocateLabel
		if pod.Labels[key] == "" {
			key = TemplateRefHashLabel
		}
		if value := pod.Labels[key]; value != "" && addColocation(pod, key, value, weight) {
			changed("spec.affinity.podAffinity: prefer the node of the template's other sandboxes")
		}
	}
}

// MutateTemplate applies the set to the Pod template of the
// SandboxTemplate named name, as Mutate to a Pod made from it, with the
// run id runID found on the template; under colocation it first labels
// the Pods with ColocateLabel, so their term is in the template too. It
// returns what it changed.
func MutateTemplate(pt *sandboxv1beta1.PodTemplate, set Set, name, runID string) ([]string, error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(pt.ObjectMeta.Labels), Annotations: maps.Clone(pt.ObjectMeta.Annotations)},
		Spec: *pt.Spec.DeepCopy()}
	var labelled []string
	if set.Colocates() && pod.Labels[ColocateLabel] == "" {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[ColocateLabel] = ColocateValue(name)
		labelled = append(labelled, fmt.Sprintf("metadata.labels %s=%s", ColocateLabel, pod.Labels[ColocateLabel]))
	}
	changes, err := Mutate(pod, set, runID)
	if err != nil {
		return nil, err
	}
	changes = append(labelled, changes...)
	if len(changes) > 0 {
		pt.ObjectMeta.Labels, pt.ObjectMeta.Annotations, pt.Spec = pod.Labels, pod.Annotations, pod.Spec
	}
	return changes, nil
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

// nodeNameField selects nodes by name, which NodeImageCaches carry (the
// hostname label need not equal it). The API allows one name per field
// requirement, so each node is a term of its own.
const nodeNameField = "metadata.name"

// maxNodeTerms bounds the terms added: a Pod's size must not grow with
// the cluster. The nodes holding most come first.
const maxNodeTerms = 20

// AddNodeCacheAffinity prefers the nodes that hold at least half of a
// Pod's image bytes, each with weight times the share it holds, as
// NodeCacheLocality's score grows with what a node holds: missing is the
// bytes of the Pod's images' layers each node with a cache lacks, of
// total. It adds nothing if no node holds half, or the Pod already
// prefers nodes by name. It reports whether it added terms.
func AddNodeCacheAffinity(pod *corev1.Pod, weight int32, missing map[string]int64, total int64) bool {
	if total <= 0 {
		return false
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		for _, t := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			for _, f := range t.Preference.MatchFields {
				if f.Key == nodeNameField {
					return false
				}
			}
		}
	}
	nodes := slices.SortedFunc(maps.Keys(missing), func(a, b string) int { return cmp.Or(cmp.Compare(missing[a], missing[b]), cmp.Compare(a, b)) })
	var terms []corev1.PreferredSchedulingTerm
	for _, n := range nodes {
		held := float64(total-missing[n]) / float64(total)
		if held < 0.5 || len(terms) == maxNodeTerms {
			break
		}
		terms = append(terms, corev1.PreferredSchedulingTerm{Weight: max(1, int32(math.Round(float64(weight)*held))),
			Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: nodeNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{n}}}}})
	}
	if len(terms) == 0 {
		return false
	}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, terms...)
	return true
}

// addColocation prefers, with weight, the node of Pods whose label key
// is value, unless the Pod already does. It reports whether it added the
// term.
func addColocation(pod *corev1.Pod, key, value string, weight int32) bool {
	term := corev1.WeightedPodAffinityTerm{Weight: weight, PodAffinityTerm: corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: value}},
		TopologyKey:   corev1.LabelHostname,
	}}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.PodAffinity == nil {
		pod.Spec.Affinity.PodAffinity = &corev1.PodAffinity{}
	}
	terms := &pod.Spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	for _, t := range *terms {
		if t.PodAffinityTerm.TopologyKey == corev1.LabelHostname && t.PodAffinityTerm.LabelSelector != nil &&
			t.PodAffinityTerm.LabelSelector.MatchLabels[key] == value {
			return false
		}
	}
	*terms = append(*terms, term)
	return true
}

func ptr[T any](v T) *T { return &v }
