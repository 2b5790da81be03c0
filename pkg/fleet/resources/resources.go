// Package resources builds the Agent Sandbox objects of a run: one
// SandboxTemplate and one SandboxWarmPool per image, and a SandboxClaim per
// task. Builders are pure; creating the objects is the caller's job.
package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// ContainerName is the name of the sandbox's main container.
const ContainerName = "sandbox"

// KeepaliveCommand keeps a sandbox's container alive until work is exec'd
// into it; most task images have no long-running entrypoint of their own.
var KeepaliveCommand = []string{"sleep", "infinity"}

// PodSpec is what a run sets on every sandbox Pod of an image.
type PodSpec struct {
	// Command keeps the container alive; default KeepaliveCommand.
	Command          []string
	Resources        corev1.ResourceRequirements
	RuntimeClassName string
	NodeSelector     map[string]string
	ImagePullSecret  string
	ImagePullPolicy  corev1.PullPolicy
	Tolerations      []corev1.Toleration
	// Colocate prefers the node that already runs a replica of the pool, so
	// that only one node pulls the image.
	Colocate bool
	// Nodes are the values of the nodes' kubernetes.io/hostname label a
	// run's pull plan chose for the image: the Pods run on one of them
	// only, where the agents pulled the image ahead of its tasks. (A
	// preference did not hold: on a cluster whose every slot is taken, a
	// pending Pod goes to whichever node frees one first, and pulls.)
	Nodes []string
	// PodLabels and PodAnnotations go on the Pods only; ObjectLabels on
	// every object of the run. The run's own labels always win.
	PodLabels, PodAnnotations, ObjectLabels map[string]string
	// OriginalImage is the image before a rewrite rule redirected it.
	OriginalImage string
	// Extra is strategically merged into the generated Pod spec, as kubectl
	// patch would, for anything not covered above. Its containers whose
	// image is config.TaskImage run the template's image.
	Extra *corev1.PodSpec
	// ExtraTemplate is merged into the SandboxTemplate's spec.
	ExtraTemplate map[string]any
	// AgentServer, when set, runs instead of Command, with probes on its
	// health path (config.AgentServer, defaulted).
	AgentServer *config.AgentServer
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// PoolName is the name of the template and warm pool of image within run
// runID: a readable stem of the image's repository and tag, and a hash of the
// run and the image, so the same image always maps to the same pool within a
// run and never to another run's pool.
func PoolName(runID, image string) string {
	sum := sha256.Sum256([]byte(runID + "\x00" + image))
	stem := image[strings.LastIndex(image, "/")+1:]
	if i := strings.Index(stem, "@"); i >= 0 {
		stem = stem[:i]
	}
	stem = strings.TrimSuffix(stem, ":latest")
	stem = strings.Trim(nonName.ReplaceAllString(strings.ToLower(stem), "-"), "-")
	// Agent Sandbox derives Sandbox and Pod names from the pool's and adds
	// suffixes; 30 + 1 + 10 characters leaves them room under 63. The end of
	// a long name is kept because that is where task images differ
	// (sweb.eval.x86_64.<instance id>).
	if len(stem) > 30 {
		cut := len(stem) - 30
		if stem[cut-1] != '-' {
			// Start at a word rather than in the middle of one.
			if i := strings.IndexByte(stem[cut:], '-'); i >= 0 && i < len(stem)-cut-1 {
				cut += i
			}
		}
		stem = strings.TrimLeft(stem[cut:], "-")
	}
	if stem == "" {
		stem = "image"
	}
	return stem + "-" + hex.EncodeToString(sum[:])[:10]
}

// Template builds the SandboxTemplate for image. It fails only when
// spec.Extra cannot be merged into the Pod spec.
func Template(namespace, runID, image string, spec PodSpec) (*extensionsv1beta1.SandboxTemplate, error) {
	name := PoolName(runID, image)
	command := spec.Command
	if len(command) == 0 {
		command = KeepaliveCommand
	}
	objectLabels := withRun(spec.ObjectLabels, runID)
	podLabels := withRun(spec.PodLabels, runID)
	maps.Copy(podLabels, spec.ObjectLabels)
	maps.Copy(podLabels, labels.ForRun(runID))
	podLabels[labels.Pool] = name
	annotations := maps.Clone(spec.PodAnnotations)
	if spec.OriginalImage != "" && spec.OriginalImage != image {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[labels.OriginalImage] = spec.OriginalImage
	}
	pod := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:            ContainerName,
			Image:           image,
			Command:         command,
			Resources:       spec.Resources,
			ImagePullPolicy: spec.ImagePullPolicy,
		}},
		NodeSelector: maps.Clone(spec.NodeSelector),
		Tolerations:  slices.Clone(spec.Tolerations),
		// The keepalive ignores SIGTERM; there is no state to flush.
		TerminationGracePeriodSeconds: new(int64(0)),
	}
	if spec.RuntimeClassName != "" {
		pod.RuntimeClassName = &spec.RuntimeClassName
	}
	if spec.ImagePullSecret != "" {
		pod.ImagePullSecrets = []corev1.LocalObjectReference{{Name: spec.ImagePullSecret}}
	}
	if spec.Colocate {
		pod.Affinity = colocate(name)
	}
	if len(spec.Nodes) > 0 {
		if pod.Affinity == nil {
			pod.Affinity = &corev1.Affinity{}
		}
		pod.Affinity.NodeAffinity = onNodes(spec.Nodes)
	}
	if spec.AgentServer != nil {
		withAgentServer(&pod, *spec.AgentServer)
	}
	if spec.Extra != nil {
		merged, err := mergePodSpec(pod, *spec.Extra)
		if err != nil {
			return nil, fmt.Errorf("merging extraPodSpec into the pod of %s: %w", image, err)
		}
		pod = merged
	}
	runTaskImage(&pod, image)
	tmplSpec := extensionsv1beta1.SandboxTemplateSpec{
		SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{
				ObjectMeta: sandboxv1beta1.PodMetadata{Labels: podLabels, Annotations: annotations},
				Spec:       pod,
			},
		},
	}
	if spec.ExtraTemplate != nil {
		var err error
		if tmplSpec, err = merge(tmplSpec, spec.ExtraTemplate); err != nil {
			return nil, fmt.Errorf("merging extraTemplateSpec into the template of %s: %w", image, err)
		}
	}
	return &extensionsv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: objectLabels},
		Spec:       tmplSpec,
	}, nil
}

// runTaskImage puts image in every container that names config.TaskImage.
func runTaskImage(pod *corev1.PodSpec, image string) {
	for _, cs := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
		for i := range cs {
			if cs[i].Image == config.TaskImage {
				cs[i].Image = image
			}
		}
	}
}

// agentServerVolume holds the server copied in from its own image.
const agentServerVolume = "agent-server"

// withAgentServer makes the sandbox container run the agent server in
// place of the keepalive, Ready only once its health path answers; with
// a server image, an init container first copies the server in.
func withAgentServer(pod *corev1.PodSpec, a config.AgentServer) {
	c := &pod.Containers[0]
	c.Command = slices.Clone(a.Command)
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: "agent-server", ContainerPort: a.Port, Protocol: corev1.ProtocolTCP})
	health := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: a.HealthPath, Port: intstr.FromInt32(a.Port)}}
	// Polled each second until it first answers, so that the sandbox is
	// Ready — claimable — as soon as the server is, and not before.
	c.StartupProbe = &corev1.Probe{ProbeHandler: health, PeriodSeconds: 1, TimeoutSeconds: 1,
		FailureThreshold: int32(max(1, a.StartupTimeout.Duration/time.Second))}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: health, PeriodSeconds: 5, TimeoutSeconds: 2, FailureThreshold: 3}
	if a.SessionKeySecret != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: a.SessionKeyEnv, ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: a.SessionKeySecret}, Key: "session-key"}}})
	}
	if a.Image == "" {
		return
	}
	const copyTo = "/sandbox-fleet/agent-server"
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: agentServerVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	pod.InitContainers = append(pod.InitContainers, corev1.Container{
		Name: "agent-server", Image: a.Image, ImagePullPolicy: c.ImagePullPolicy,
		Command:      []string{"cp", "-a", a.Path + "/.", copyTo + "/"},
		VolumeMounts: []corev1.VolumeMount{{Name: agentServerVolume, MountPath: copyTo}},
	})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: agentServerVolume, MountPath: a.Path, ReadOnly: true})
}

// merge applies extra to spec as a merge patch: maps merge, lists and
// values are replaced.
func merge(spec extensionsv1beta1.SandboxTemplateSpec, extra map[string]any) (extensionsv1beta1.SandboxTemplateSpec, error) {
	base, err := json.Marshal(spec)
	if err != nil {
		return spec, err
	}
	patch, err := json.Marshal(extra)
	if err != nil {
		return spec, err
	}
	merged, err := jsonpatch.MergePatch(base, patch)
	if err != nil {
		return spec, err
	}
	var out extensionsv1beta1.SandboxTemplateSpec
	if err := json.Unmarshal(merged, &out); err != nil {
		return spec, err
	}
	return out, nil
}

// withRun returns extra with the run's labels over it.
func withRun(extra map[string]string, runID string) map[string]string {
	out := maps.Clone(extra)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, labels.ForRun(runID))
	return out
}

// colocate softly prefers nodes already running a replica of pool: only the
// first replica pulls the image, and a full node spills over rather than
// leaving replicas pending.
func colocate(pool string) *corev1.Affinity {
	return &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.Pool: pool}},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}}
}

// onNodes requires one of the nodes of hostnames.
func onNodes(hostnames []string) *corev1.NodeAffinity {
	return &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: slices.Clone(hostnames),
		}}}},
	}}
}

// mergePodSpec applies extra to base as a strategic merge patch, so that
// lists such as containers and volumes merge by name.
func mergePodSpec(base, extra corev1.PodSpec) (corev1.PodSpec, error) {
	baseJSON, err := json.Marshal(base)
	if err != nil {
		return base, err
	}
	// A PodSpec marshals its containers as null when it has none, which
	// a merge patch reads as "delete them": leave out what extra does
	// not set.
	var fields map[string]any
	raw, err := json.Marshal(extra)
	if err == nil {
		err = json.Unmarshal(raw, &fields)
	}
	if err != nil {
		return base, err
	}
	maps.DeleteFunc(fields, func(_ string, v any) bool { return v == nil })
	patch, err := json.Marshal(fields)
	if err != nil {
		return base, err
	}
	merged, err := strategicpatch.StrategicMergePatch(baseJSON, patch, corev1.PodSpec{})
	if err != nil {
		return base, err
	}
	var out corev1.PodSpec
	if err := json.Unmarshal(merged, &out); err != nil {
		return base, err
	}
	return out, nil
}

// WarmPool builds the SandboxWarmPool that keeps replicas sandboxes of
// template warm.
func WarmPool(template *extensionsv1beta1.SandboxTemplate, replicas int32) *extensionsv1beta1.SandboxWarmPool {
	return &extensionsv1beta1.SandboxWarmPool{
		ObjectMeta: metav1.ObjectMeta{
			Name:      template.Name,
			Namespace: template.Namespace,
			Labels:    maps.Clone(template.Labels),
		},
		Spec: extensionsv1beta1.SandboxWarmPoolSpec{
			Replicas:    &replicas,
			TemplateRef: extensionsv1beta1.SandboxTemplateRef{Name: template.Name},
		},
	}
}

// Claim builds a SandboxClaim on pool for one task. Its name — the pool's
// and a random suffix, as the API server would generate — is fixed here,
// before the first create, so that a create retried after its answer was
// lost finds the claim it made instead of making a second (see
// ClaimName for another try at a free name). annotations go on it too.
func Claim(pool *extensionsv1beta1.SandboxWarmPool, taskID string, annotations map[string]string) *extensionsv1beta1.SandboxClaim {
	ann := maps.Clone(annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[labels.TaskID] = taskID
	return &extensionsv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ClaimName(pool),
			Namespace:   pool.Namespace,
			Labels:      maps.Clone(pool.Labels),
			Annotations: ann,
		},
		Spec: extensionsv1beta1.SandboxClaimSpec{
			WarmPoolRef: extensionsv1beta1.SandboxWarmPoolRef{Name: pool.Name},
		},
	}
}

// ClaimName is a fresh claim name on pool: the pool's name, a dash and five
// random characters, well under the 63 that Agent Sandbox's Sandbox and
// Service names allow.
func ClaimName(pool *extensionsv1beta1.SandboxWarmPool) string {
	return pool.Name + "-" + utilrand.String(5)
}
