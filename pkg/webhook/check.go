package webhook

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

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

// volumeTypes are the volume sources of the Pod spec, by the names the
// spec gives them (its fields' JSON names).
var volumeTypes = func() []string {
	t := reflect.TypeFor[corev1.VolumeSource]()
	out := make([]string, t.NumField())
	for i := range out {
		out[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return out
}()

// nodeFreeVolumeTypes reach nothing of the node's own: the kubelet makes
// them from the API's objects, a claim's volume or an image, as Pod
// Security's restricted profile allows them. hostPath, which is the
// node's, is allowHostPath's to allow.
var nodeFreeVolumeTypes = []string{"emptyDir", "configMap", "secret", "downwardAPI", "projected", "persistentVolumeClaim", "ephemeral", "image", "hostPath"}

// volumeType is the volume source v sets ("" for none).
func volumeType(v corev1.VolumeSource) string {
	r := reflect.ValueOf(v)
	for i := range r.NumField() {
		if !r.Field(i).IsNil() {
			return volumeTypes[i]
		}
	}
	return ""
}

// systemPriorityClasses are the cluster's own: a Pod of theirs preempts
// and outlives everything else on its node.
var systemPriorityClasses = []string{"system-node-critical", "system-cluster-critical"}

// unconfined reports whether a seccomp or AppArmor profile is Unconfined,
// an SELinux type not one of containerSELinuxTypes, or an SELinux user or
// role set (Pod Security's baseline forbids any: they pick a confinement
// of their own).
func unconfined(seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile, selinux *corev1.SELinuxOptions) (string, bool) {
	switch {
	case seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined:
		return "seccompProfile.type", true
	case apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined:
		return "appArmorProfile.type", true
	case selinux != nil && !slices.Contains(containerSELinuxTypes, selinux.Type):
		return "seLinuxOptions.type", true
	case selinux != nil && selinux.User != "":
		return "seLinuxOptions.user", true
	case selinux != nil && selinux.Role != "":
		return "seLinuxOptions.role", true
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
	scheduler, d := set.single(at+".schedulerName", func(s v1alpha1.SandboxPolicySpec) string { return s.SchedulerName })
	if d != nil {
		return d
	}
	rules := set.rules()
	// A container without a limit gets the strictest cap (Mutate).
	caps := maxLimits(set)
	for _, p := range set {
		deny := func(field, reason string) *Denial {
			return &Denial{Policies: []string{p.Name}, Field: field, Reason: reason}
		}
		if d := checkPod(spec, at, p, deny); d != nil {
			return d
		}
		if d := checkPlacement(spec, at, scheduler.value, p, deny); d != nil {
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
		if d := checkPodTotal(spec, at, caps, p, deny); d != nil {
			return d
		}
	}
	return nil
}

// checkPlacement refuses what would place a sandbox where the admin did
// not mean sandboxes to go: a toleration p does not allow, or a scheduler
// other than the cluster's default, the set's (scheduler, which Mutate
// sets) and those p allows.
func checkPlacement(spec *corev1.PodSpec, at, scheduler string, p v1alpha1.SandboxPolicy, deny func(field, reason string) *Denial) *Denial {
	if d := checkTolerations(spec.Tolerations, at, p, deny); d != nil {
		return d
	}
	sec := security(p)
	if name := spec.SchedulerName; name != "" && name != corev1.DefaultSchedulerName && name != scheduler && !slices.Contains(sec.AllowedSchedulerNames, name) {
		return deny(at+".schedulerName", fmt.Sprintf("scheduler %s is neither the cluster's default, the policies' (spec.schedulerName) nor in spec.security.allowedSchedulerNames %v",
			name, sec.AllowedSchedulerNames))
	}
	return nil
}

// checkTolerations refuses a toleration p does not allow.
func checkTolerations(tolerations []corev1.Toleration, at string, p v1alpha1.SandboxPolicy, deny func(field, reason string) *Denial) *Denial {
	allowed := security(p).AllowedTolerationKeys
	for i, t := range tolerations {
		if !tolerationAllowed(t, allowed) {
			what := "taint " + t.Key
			if t.Key == "" {
				what = "every taint"
			}
			return deny(fmt.Sprintf("%s.tolerations[%d]", at, i), fmt.Sprintf("tolerating %s would let the sandbox onto nodes its taint keeps Pods off; "+
				"spec.security.allowedTolerationKeys %v", what, allowed))
		}
	}
	return nil
}

// evictionTolerations are the taints the API server has every Pod
// tolerate for a while (NoExecute, DefaultTolerationSeconds): they delay
// its eviction from a failing node, and place it nowhere.
var evictionTolerations = []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}

// tolerationAllowed reports whether a sandbox may have toleration t:
// one of a taint key allowed, or the API server's own for eviction.
func tolerationAllowed(t corev1.Toleration, allowed []string) bool {
	if t.Key == "" {
		return false
	}
	if slices.Contains(evictionTolerations, t.Key) && t.Effect == corev1.TaintEffectNoExecute {
		return true
	}
	return slices.Contains(allowed, t.Key)
}

// checkPodTotal refuses a Pod that may use more than p's caps: a cap
// bounds a sandbox, which is the whole Pod, not one container. A
// pod-level limit (spec.resources) bounds the Pod where it is set;
// elsewhere its containers' limits add up as the kubelet sizes a Pod
// (podLimit), a container without one counted at what Mutate gives it,
// defaults — and, without a default, leaving the Pod unbounded.
func checkPodTotal(spec *corev1.PodSpec, at string, defaults corev1.ResourceList, p v1alpha1.SandboxPolicy, deny func(field, reason string) *Denial) *Denial {
	for _, name := range slices.Sorted(maps.Keys(p.Spec.MaxLimits)) {
		limit := p.Spec.MaxLimits[name]
		if r := spec.Resources; r != nil {
			if got, ok := r.Requests[name]; ok && got.Cmp(limit) > 0 {
				return deny(fmt.Sprintf("%s.resources.requests.%s", at, name), fmt.Sprintf("%s is above the cap of %s on a sandbox (spec.maxLimits)", &got, &limit))
			}
			if got, ok := r.Limits[name]; ok {
				if got.Cmp(limit) > 0 {
					return deny(fmt.Sprintf("%s.resources.limits.%s", at, name), fmt.Sprintf("%s is above the cap of %s on a sandbox (spec.maxLimits)", &got, &limit))
				}
				continue
			}
		}
		total, unbounded := podLimit(spec, at, name, defaults)
		if unbounded != "" {
			return deny(fmt.Sprintf("%s.resources.limits.%s", unbounded, name), fmt.Sprintf("a container without a limit leaves the sandbox unbounded; the cap is %s (spec.maxLimits)", &limit))
		}
		if total.Cmp(limit) > 0 {
			return deny(fmt.Sprintf("%s.containers[*].resources.limits.%s", at, name),
				fmt.Sprintf("the Pod's containers together may use %s, above the cap of %s on a sandbox (spec.maxLimits): give each container a limit so that together they are within it, or set a pod-level limit within it (%s.resources.limits)", &total, &limit, at))
		}
	}
	return nil
}

// podLimit is the most of resource name that spec's containers may use at
// once: the app containers and the sidecars (init containers that keep
// running) together, or an init container with the sidecars started
// before it, whichever is more. A container without a limit counts as
// defaults has it; unbounded is the path (under at) of one defaults
// has none for.
func podLimit(spec *corev1.PodSpec, at string, name corev1.ResourceName, defaults corev1.ResourceList) (total resource.Quantity, unbounded string) {
	limitOf := func(c *corev1.Container) (resource.Quantity, bool) {
		if q, ok := c.Resources.Limits[name]; ok {
			return q, true
		}
		q, ok := defaults[name]
		return q, ok
	}
	var sidecars, initPeak resource.Quantity
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		q, ok := limitOf(c)
		if !ok {
			return total, fmt.Sprintf("%s.initContainers[%d]", at, i)
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars.Add(q)
			continue
		}
		with := sidecars.DeepCopy()
		with.Add(q)
		if with.Cmp(initPeak) > 0 {
			initPeak = with
		}
	}
	total = sidecars.DeepCopy()
	for i := range spec.Containers {
		q, ok := limitOf(&spec.Containers[i])
		if !ok {
			return total, fmt.Sprintf("%s.containers[%d]", at, i)
		}
		total.Add(q)
	}
	if initPeak.Cmp(total) > 0 {
		total = initPeak
	}
	return total, ""
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
	if spec.NodeName != "" {
		return deny(at+".nodeName", "sandboxes are placed by the scheduler, not named onto a node (which skips its checks and taints): "+
			"pick nodes with a nodeSelector or affinity")
	}
	if slices.Contains(systemPriorityClasses, spec.PriorityClassName) {
		return deny(at+".priorityClassName", fmt.Sprintf("priority class %s is the cluster's own, not a sandbox's", spec.PriorityClassName))
	}
	for i, v := range spec.Volumes {
		if t := volumeType(v.VolumeSource); t != "" && !slices.Contains(nodeFreeVolumeTypes, t) && !slices.Contains(sec.AllowedVolumeTypes, t) {
			return deny(fmt.Sprintf("%s.volumes[%d].%s", at, i, t),
				fmt.Sprintf("%s volumes are mounted by the node itself, and %s is not in spec.security.allowedVolumeTypes %v", t, t, sec.AllowedVolumeTypes))
		}
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
	changes, err := Mutate(asCreated(pod), set, runID)
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
		if d := checkPodTotal(&pod.Spec, "spec", nil, p, deny); d != nil {
			return d
		}
	}
	return nil
}
