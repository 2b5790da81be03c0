package webhook

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// MutateUpdate applies the set to an update of a sandbox Pod from old to
// pod, which the API server lets change few fields once the Pod exists:
// of those the policies constrain its containers' images, so each image
// the update changes is rewritten to the mirror (its original recorded)
// and refused outside the allowed registries, as at creation; and it may
// not take the Pod out of the webhook's sight by removing
// SandboxPodLabel. An update that makes a Pod a sandbox Pod — its creator
// adding SandboxPodLabel, or the Agent Sandbox controller adopting it —
// is judged as its creation would have been (becomingSandbox), and every
// image of it as new. It returns what it changed.
func MutateUpdate(old, pod *corev1.Pod, set Set) ([]string, error) {
	if len(set) == 0 {
		return nil, nil
	}
	_, had := old.Labels[SandboxPodLabel]
	if _, has := pod.Labels[SandboxPodLabel]; had && !has {
		return nil, &Denial{Policies: set.names(), Field: "metadata.labels[" + SandboxPodLabel + "]",
			Reason: "a sandbox Pod in a namespace a SandboxPolicy governs keeps the Agent Sandbox controller's label, by which the policies see it"}
	}
	before := map[string]string{}
	if !had {
		if err := becomingSandbox(pod, set); err != nil {
			return nil, err
		}
	} else {
		for _, c := range containersOf(&old.Spec, "spec") {
			before[c.c.Name] = c.c.Image
		}
	}
	// Tolerations may be added to a Pod not yet bound: held to the set as
	// at creation.
	if had && len(pod.Spec.Tolerations) > len(old.Spec.Tolerations) {
		for _, p := range set {
			deny := func(field, reason string) *Denial {
				return &Denial{Policies: []string{p.Name}, Field: field, Reason: reason}
			}
			if d := checkTolerations(pod.Spec.Tolerations, "spec", p, deny); d != nil {
				return nil, d
			}
		}
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

// becomingSandbox refuses a Pod an update makes a sandbox Pod unless it is
// already what Mutate makes of one: the webhook did not see it created,
// and an update can change none of its spec but its containers' images
// (which MutateUpdate rewrites). The run-id label and the placement
// preference are not asked for: they judge nothing.
func becomingSandbox(pod *corev1.Pod, set Set) error {
	changes, err := Mutate(asCreated(pod), set, "")
	if err != nil {
		return err
	}
	var missing []string
	for _, c := range changes {
		field, _, _ := strings.Cut(c, " ")
		if strings.HasPrefix(field, "spec.affinity") || mutableImage.MatchString(field) {
			continue
		}
		missing = append(missing, c)
	}
	if len(missing) == 0 {
		return nil
	}
	field, _, _ := strings.Cut(missing[0], " ")
	return &Denial{Policies: set.names(), Field: field, Reason: "a Pod becomes a sandbox Pod (" + SandboxPodLabel +
		" added, or adopted by the Agent Sandbox controller) only as the policies make one at creation, which it cannot become by an update; create it with " +
		strings.Join(missing, ", ")}
}

// asCreated is a copy of an existing pod to judge as a creation: without
// the node the scheduler bound it to, which a creation may not name (an
// update cannot tell the binding's from its creator's).
func asCreated(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	p.Spec.NodeName = ""
	return p
}

// mutableImage matches the image fields an update may change: a
// container's, not an image volume's.
var mutableImage = regexp.MustCompile(`^spec\.(initContainers|containers)\[\d+\]\.image$`)

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
