package webhook

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// An ephemeral container is not mutated: one the set would change or
// refuse is denied, saying what to set; one that comes as the set makes a
// container passes, whatever the rest of the Pod.
func TestCheckEphemeral(t *testing.T) {
	// The caps give containers limits, which ephemeral ones may not have.
	set := Set{policy("mirror", 0, mirror, func(s *v1alpha1.SandboxPolicySpec) {
		s.MaxLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}
	})}
	admitted := sandboxPod()
	if _, err := Mutate(admitted, set, "run-1"); err != nil {
		t.Fatal(err)
	}
	debug := func(edit func(*corev1.EphemeralContainer)) *corev1.Pod {
		pod := admitted.DeepCopy()
		e := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(*pod.Spec.Containers[0].DeepCopy())}
		e.Name, e.Resources = "debug", corev1.ResourceRequirements{}
		if edit != nil {
			edit(&e)
		}
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, e)
		return pod
	}
	for _, tt := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"as the policies make a container", debug(nil), ""},
		{"in a scheduled Pod", func() *corev1.Pod { p := debug(nil); p.Spec.NodeName = "node-1"; return p }(), ""},
		{"no ephemeral container", admitted, ""},
		{"keeping its capabilities", debug(func(e *corev1.EphemeralContainer) { e.SecurityContext.Capabilities = nil }),
			`denied by SandboxPolicy "mirror": spec.ephemeralContainers[0].securityContext.capabilities.drop: an ephemeral container must come as the policies make a container; set spec.ephemeralContainers[0].securityContext.capabilities.drop ALL`},
		{"an image the mirror serves", debug(func(e *corev1.EphemeralContainer) { e.Image = "docker.io/library/busybox:1.36" }),
			`set spec.ephemeralContainers[0].image docker.io/library/busybox:1.36 → mirror.example.com/hub/library/busybox:1.36`},
		{"privileged", debug(func(e *corev1.EphemeralContainer) { e.SecurityContext.Privileged = ptr(true) }),
			`denied by SandboxPolicy "mirror": spec.ephemeralContainers[0].securityContext.privileged: privileged containers are not allowed`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckEphemeral(tt.pod, set, "run-1")
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("CheckEphemeral = %v, want %q", err, tt.want)
			}
		})
	}
}

// A resize keeps within the caps, and keeps the capped limits.
func TestCheckResize(t *testing.T) {
	set := Set{policy("caps", 0, func(s *v1alpha1.SandboxPolicySpec) {
		s.MaxLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}
	})}
	admitted := sandboxPod()
	if _, err := Mutate(admitted, set, "run-1"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		edit   func(*corev1.ResourceRequirements)
		denied string
	}{
		{"within", func(r *corev1.ResourceRequirements) { r.Limits[corev1.ResourceMemory] = resource.MustParse("6Gi") }, ""},
		{"past the cap", func(r *corev1.ResourceRequirements) { r.Limits[corev1.ResourceMemory] = resource.MustParse("9Gi") },
			`denied by SandboxPolicy "caps": spec.containers[0].resources.limits.memory: 9Gi is above the cap of 8Gi (spec.maxLimits)`},
		{"a request past the cap", func(r *corev1.ResourceRequirements) { r.Requests[corev1.ResourceMemory] = resource.MustParse("10Gi") },
			`denied by SandboxPolicy "caps": spec.containers[0].resources.requests.memory: 10Gi is above the cap of 8Gi on limits`},
		{"the limit taken away", func(r *corev1.ResourceRequirements) { delete(r.Limits, corev1.ResourceMemory) },
			`denied by SandboxPolicy "caps": spec.containers[0].resources.limits.memory: a sandbox's limit may not be removed; the cap is 8Gi`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := admitted.DeepCopy()
			tt.edit(&pod.Spec.Containers[0].Resources)
			d := CheckResize(pod, set)
			if tt.denied == "" && d != nil || tt.denied != "" && (d == nil || !strings.HasPrefix(d.Error(), tt.denied)) {
				t.Errorf("CheckResize = %v, want %q", d, tt.denied)
			}
		})
	}
	// Two containers of 4Gi: one resized to 6Gi is within its cap, not
	// the Pod within the sandbox's.
	pod := admitted.DeepCopy()
	pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("4Gi")
	second := *pod.Spec.Containers[0].DeepCopy()
	second.Name = "second"
	pod.Spec.Containers = append(pod.Spec.Containers, second)
	if d := CheckResize(pod, set); d != nil {
		t.Errorf("two containers of 4Gi under a cap of 8Gi: %v", d)
	}
	pod.Spec.Containers[1].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("6Gi")
	want := `denied by SandboxPolicy "caps": spec.containers[*].resources.limits.memory: the Pod's containers together may use 10Gi, above the cap of 8Gi`
	if d := CheckResize(pod, set); d == nil || !strings.HasPrefix(d.Error(), want) {
		t.Errorf("a second container resized past the Pod's cap: %v, want %q", d, want)
	}
}

func TestCheckSecret(t *testing.T) {
	allowsTokens := func(s *v1alpha1.SandboxPolicySpec) {
		s.Security = &v1alpha1.SecurityPolicy{AllowServiceAccountToken: true}
	}
	for _, tt := range []struct {
		name       string
		secretType corev1.SecretType
		set        Set
		want       string // the refusing policy, "" for none
	}{
		{"an opaque Secret", corev1.SecretTypeOpaque, Set{policy("baseline", 0)}, ""},
		{"a registry credential", corev1.SecretTypeDockerConfigJson, Set{policy("baseline", 0)}, ""},
		{"a token Secret where tokens are not allowed", corev1.SecretTypeServiceAccountToken, Set{policy("baseline", 0)}, "baseline"},
		{"a token Secret where they are", corev1.SecretTypeServiceAccountToken, Set{policy("baseline", 0, allowsTokens)}, ""},
		{"a token Secret where one of two policies does not allow them", corev1.SecretTypeServiceAccountToken,
			Set{policy("open", 10, allowsTokens), policy("strict", 0)}, "strict"},
		{"no policy", corev1.SecretTypeServiceAccountToken, nil, ""},
	} {
		d := CheckSecret(tt.secretType, tt.set)
		switch {
		case tt.want == "" && d != nil:
			t.Errorf("%s: refused: %v", tt.name, d)
		case tt.want != "" && (d == nil || !slices.Equal(d.Policies, []string{tt.want}) || d.Field != "type" || !strings.Contains(d.Reason, "allowServiceAccountToken")):
			t.Errorf("%s: %v, want a refusal of its type by %s naming allowServiceAccountToken", tt.name, d, tt.want)
		}
	}
}

// TestPodLimit: a Pod's containers add up as the kubelet sizes the Pod —
// app containers and sidecars together, or an init container with the
// sidecars before it, whichever is more.
func TestPodLimit(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	c := func(name, cpu string, sidecar bool) corev1.Container {
		out := corev1.Container{Name: name}
		if cpu != "" {
			out.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		if sidecar {
			out.RestartPolicy = &always
		}
		return out
	}
	for _, tt := range []struct {
		name            string
		init, app       []corev1.Container
		defaults        corev1.ResourceList
		want, unbounded string
	}{
		{"one container", nil, []corev1.Container{c("a", "2", false)}, nil, "2", ""},
		{"app containers add up", nil, []corev1.Container{c("a", "2", false), c("b", "1500m", false)}, nil, "3500m", ""},
		{"an init container alone, when more", []corev1.Container{c("i", "5", false)}, []corev1.Container{c("a", "2", false)}, nil, "5", ""},
		{"an init container after a sidecar", []corev1.Container{c("s", "1", true), c("i", "3", false)}, []corev1.Container{c("a", "2", false)}, nil, "4", ""},
		{"sidecars run beside the app", []corev1.Container{c("s", "1", true), c("i", "2", false)}, []corev1.Container{c("a", "2", false)}, nil, "3", ""},
		{"a container without a limit gets the default", nil, []corev1.Container{c("a", "2", false), c("b", "", false)}, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}, "6", ""},
		{"a container without a limit and no default", nil, []corev1.Container{c("a", "2", false), c("b", "", false)}, nil, "", "spec.containers[1]"},
		{"an init container without one", []corev1.Container{c("i", "", false)}, []corev1.Container{c("a", "2", false)}, nil, "", "spec.initContainers[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, unbounded := podLimit(&corev1.PodSpec{InitContainers: tt.init, Containers: tt.app}, "spec", corev1.ResourceCPU, tt.defaults)
			if unbounded != tt.unbounded || tt.want != "" && got.Cmp(resource.MustParse(tt.want)) != 0 {
				t.Errorf("podLimit = %s, %q; want %s, %q", &got, unbounded, tt.want, tt.unbounded)
			}
		})
	}
}
