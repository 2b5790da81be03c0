package resources

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestPoolName(t *testing.T) {
	tests := []struct {
		runID, image string
		wantStem     string
	}{
		{"r1", "busybox:1.36", "busybox-1-36-"},
		{"r1", "docker.io/library/busybox:1.36", "busybox-1-36-"},
		{"r1", "ghcr.io/epoch-research/swe-bench.eval.x86_64.astropy__astropy-12907:latest", "x86-64-astropy-astropy-12907-"},
		{"r1", "registry.local:5000/team/img@sha256:0123456789abcdef", "img-"},
		{"r1", "UPPER/___:___", "image-"},
	}
	for _, tt := range tests {
		got := PoolName(tt.runID, tt.image)
		if len(got) > 41 || !dns1123.MatchString(got) {
			t.Errorf("PoolName(%q) = %q: not a DNS label of at most 41 characters", tt.image, got)
		}
		if got[:len(got)-10] != tt.wantStem {
			t.Errorf("PoolName(%q) = %q, want stem %q", tt.image, got, tt.wantStem)
		}
		if again := PoolName(tt.runID, tt.image); again != got {
			t.Errorf("PoolName(%q) is not stable: %q then %q", tt.image, got, again)
		}
		if other := PoolName("r2", tt.image); other == got {
			t.Errorf("runs r1 and r2 share pool %q for %q", got, tt.image)
		}
	}
	if PoolName("r1", "busybox:1.36") == PoolName("r1", "busybox:1.37") {
		t.Error("two images of one run share a pool name")
	}
}

func TestObjectsCarryTheRunLabels(t *testing.T) {
	tmpl, err := Template("ns", "run-7", "busybox:1.36", PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	pool := WarmPool(tmpl, 3)
	claim := Claim(pool, "task-1", nil)
	for what, got := range map[string]map[string]string{
		"template": tmpl.Labels, "pod template": tmpl.Spec.PodTemplate.ObjectMeta.Labels,
		"pool": pool.Labels, "claim": claim.Labels,
	} {
		if got[labels.RunID] != "run-7" || got[labels.ManagedBy] != labels.ManagedByValue {
			t.Errorf("%s labels %v lack the run's", what, got)
		}
	}
	if pool.Spec.TemplateRef.Name != tmpl.Name || *pool.Spec.Replicas != 3 || claim.Spec.WarmPoolRef.Name != pool.Name {
		t.Errorf("objects do not reference each other: pool %+v claim %+v", pool.Spec, claim.Spec)
	}
	if got := tmpl.Spec.PodTemplate.Spec.Containers[0].Command; len(got) != 2 || got[0] != "sleep" {
		t.Errorf("default command %v, want the keepalive", got)
	}
	if claim.Annotations[labels.TaskID] != "task-1" {
		t.Errorf("claim annotations %v lack the task id", claim.Annotations)
	}
}

func TestTemplatePodSpec(t *testing.T) {
	spec := PodSpec{
		RuntimeClassName: "gvisor",
		NodeSelector:     map[string]string{"pool": "e2"},
		ImagePullSecret:  "regcred",
		ImagePullPolicy:  corev1.PullNever,
		Tolerations:      []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpExists}},
		Colocate:         true,
		Nodes:            []string{"node-1", "node-4"},
		PodLabels:        map[string]string{"team": "rl", labels.RunID: "spoofed"},
		PodAnnotations:   map[string]string{"note": "x"},
		ObjectLabels:     map[string]string{"cost-center": "42"},
		OriginalImage:    "docker.io/library/busybox:1.36",
		Extra: &corev1.PodSpec{
			PriorityClassName: "rollouts",
			Containers:        []corev1.Container{{Name: ContainerName, WorkingDir: "/testbed"}},
		},
	}
	tmpl, err := Template("ns", "run-7", "mirror.local/busybox:1.36", spec)
	if err != nil {
		t.Fatal(err)
	}
	pod := tmpl.Spec.PodTemplate
	c := pod.Spec.Containers
	switch {
	case *pod.Spec.RuntimeClassName != "gvisor", pod.Spec.NodeSelector["pool"] != "e2",
		pod.Spec.ImagePullSecrets[0].Name != "regcred", pod.Spec.Tolerations[0].Key != "sandbox":
		t.Errorf("pod spec %+v lacks the configured scheduling fields", pod.Spec)
	case len(c) != 1 || c[0].WorkingDir != "/testbed" || c[0].Image != "mirror.local/busybox:1.36" || c[0].ImagePullPolicy != corev1.PullNever:
		t.Errorf("containers %+v: extraPodSpec must merge into the sandbox container by name", c)
	case pod.Spec.PriorityClassName != "rollouts":
		t.Errorf("extraPodSpec priority class lost: %q", pod.Spec.PriorityClassName)
	case pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels[labels.Pool] != tmpl.Name:
		t.Errorf("colocate: affinity %+v does not prefer the pool's own nodes", pod.Spec.Affinity)
	case !reflect.DeepEqual(pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms,
		[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: spec.Nodes}}}}):
		t.Errorf("planned nodes: node affinity %+v does not require one of %v", pod.Spec.Affinity.NodeAffinity, spec.Nodes)
	case pod.ObjectMeta.Labels[labels.RunID] != "run-7" || pod.ObjectMeta.Labels["team"] != "rl" || pod.ObjectMeta.Labels["cost-center"] != "42" || pod.ObjectMeta.Labels[labels.Pool] != tmpl.Name:
		t.Errorf("pod labels %v: want the run's over the user's, plus pool and object labels", pod.ObjectMeta.Labels)
	case pod.ObjectMeta.Annotations[labels.OriginalImage] != spec.OriginalImage || pod.ObjectMeta.Annotations["note"] != "x":
		t.Errorf("pod annotations %v lack the original image or the user's", pod.ObjectMeta.Annotations)
	case tmpl.Labels["cost-center"] != "42" || tmpl.Labels["team"] != "":
		t.Errorf("template labels %v: want object labels only", tmpl.Labels)
	}
}

// An extraPodSpec that sets no containers leaves the sandbox container be.
func TestExtraPodSpecWithoutContainers(t *testing.T) {
	tmpl, err := Template("ns", "run-7", "busybox:1.36", PodSpec{Extra: &corev1.PodSpec{SchedulerName: "sandbox-fleet-scheduler"}})
	if err != nil {
		t.Fatal(err)
	}
	spec := tmpl.Spec.PodTemplate.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Image != "busybox:1.36" || spec.SchedulerName != "sandbox-fleet-scheduler" {
		t.Errorf("pod spec %+v: want the sandbox container and the extra scheduler name", spec)
	}
}

// containersOf renders what a template runs, for golden files.
func containersOf(t *testing.T, tmpl *extensionsv1beta1.SandboxTemplate) string {
	t.Helper()
	pod := tmpl.Spec.PodTemplate.Spec
	out, err := yaml.Marshal(map[string]any{"initContainers": pod.InitContainers, "containers": pod.Containers, "volumes": pod.Volumes})
	if err != nil {
		t.Fatal(err)
	}
	return "# " + tmpl.Name + "\n" + string(out)
}

// A container of extraPodSpec whose image is {task_image} runs each pool's
// own image beside the sandbox: a grading sidecar, say.
func TestTaskImageContainers(t *testing.T) {
	spec := PodSpec{Extra: &corev1.PodSpec{Containers: []corev1.Container{{
		Name: "grader", Image: config.TaskImage, Command: []string{"sleep", "infinity"},
	}}}}
	var b strings.Builder
	for _, image := range []string{"docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest", "registry.example/r2e/orange3:0123"} {
		tmpl, err := Template("ns", "run-7", image, spec)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(containersOf(t, tmpl))
	}
	golden.Assert(t, "task-image", b.String())
	if spec.Extra.Containers[0].Image != config.TaskImage {
		t.Error("rendering changed the configuration's extraPodSpec")
	}
}

// The agent server runs in place of the keepalive, with probes on its
// health path and the session key from its Secret; from an image of its
// own, an init container copies it in first.
func TestAgentServer(t *testing.T) {
	const head = "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\ntemplate:\n  agentServer:\n"
	for _, tc := range []struct{ name, server string }{
		{"agent-server-in-image", "    command: [python3, -m, openhands.agent_server, --port, '8000']\n    sessionKeySecret: agent-key\n"},
		{"agent-server-copied", "    command: [/opt/agent-server/bin/agent-server]\n    image: ghcr.io/example/agent-server:1.0\n" +
			"    allowWithoutSessionKey: true\n    port: 3000\n    healthPath: /alive\n    startupTimeout: 30s\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := config.Parse("fleet.yaml", []byte(head+tc.server))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := Template("ns", "run-7", "docker.io/library/python:3.12", PodSpec{Command: f.Template.Command, AgentServer: f.Template.AgentServer})
			if err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, tc.name, containersOf(t, tmpl))
		})
	}
}

// extraTemplateSpec reaches the template's own fields; the Pod stays the
// generated one.
func TestExtraTemplateSpec(t *testing.T) {
	tmpl, err := Template("ns", "run-7", "busybox:1.36", PodSpec{ExtraTemplate: map[string]any{
		"networkPolicyManagement": "Unmanaged",
		"service":                 false,
	}})
	if err != nil {
		t.Fatal(err)
	}
	spec := tmpl.Spec
	if spec.NetworkPolicyManagement != extensionsv1beta1.NetworkPolicyManagementUnmanaged || spec.Service == nil || *spec.Service {
		t.Errorf("template spec %+v lacks the extra fields", spec)
	}
	if c := spec.PodTemplate.Spec.Containers; len(c) != 1 || c[0].Image != "busybox:1.36" || spec.PodTemplate.ObjectMeta.Labels[labels.RunID] != "run-7" {
		t.Errorf("the pod template changed: %+v", spec.PodTemplate)
	}
}
