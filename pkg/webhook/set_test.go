package webhook

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

func TestColocateValue(t *testing.T) {
	long := strings.Repeat("swe-bench-django-", 10)
	for _, name := range []string{"swe-django", strings.Repeat("a", 63), long, long + "x"} {
		v := ColocateValue(name)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("%s: %q is not a label value: %v", name, v, errs)
		}
		if len(name) <= 63 && v != name {
			t.Errorf("%s: %q, want the name", name, v)
		}
	}
	if ColocateValue(long) == ColocateValue(long+"x") {
		t.Errorf("two long names share a value")
	}
}

func TestSelect(t *testing.T) {
	all := []v1alpha1.SandboxPolicy{
		policy("everywhere", 0),
		policy("rl-only", 10, func(s *v1alpha1.SandboxPolicySpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "rl"}}
		}),
		policy("also-everywhere", 0),
		policy("other-team", 20, func(s *v1alpha1.SandboxPolicySpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "evals"}}
		}),
	}
	set, err := Select(all, map[string]string{"team": "rl"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range set {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "rl-only,also-everywhere,everywhere" {
		t.Errorf("Select = %s, want the matching policies, highest priority first, then by name", got)
	}

	bad := policy("bad", 0, func(s *v1alpha1.SandboxPolicySpec) {
		s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
	})
	if _, err := Select([]v1alpha1.SandboxPolicy{bad}, nil); err == nil || !strings.Contains(err.Error(), `SandboxPolicy "bad": spec.namespaceSelector`) {
		t.Errorf("a bad selector gave %v", err)
	}
}

// The webhook reads a registry for a Pod only where every policy that
// lists registries allows it, and some policy does.
func TestAllowsRegistryOf(t *testing.T) {
	allow := func(name string, registries ...string) v1alpha1.SandboxPolicy {
		return policy(name, 0, func(s *v1alpha1.SandboxPolicySpec) { s.Images = &v1alpha1.ImagePolicy{AllowedRegistries: registries} })
	}
	for _, tt := range []struct {
		set   Set
		image string
		want  bool
	}{
		{Set{allow("a", "mirror.example.com")}, "mirror.example.com/hub/x:1", true},
		{Set{allow("a", "mirror.example.com")}, "10.0.0.5:5000/x:1", false},
		{Set{allow("a", "mirror.example.com"), allow("b", "mirror.example.com/hub")}, "mirror.example.com/other/x:1", false},
		{Set{allow("a", "mirror.example.com"), policy("open", 0)}, "mirror.example.com/x:1", true},
		{Set{policy("open", 0)}, "mirror.example.com/x:1", false},
	} {
		if got := tt.set.AllowsRegistryOf(tt.image); got != tt.want {
			t.Errorf("%v: AllowsRegistryOf(%s) = %v, want %v", tt.set.names(), tt.image, got, tt.want)
		}
	}
}

// The sample policy of examples/ governs only the namespaces labelled for
// it, and there does what its comments say.
func TestExamplePolicy(t *testing.T) {
	b, err := os.ReadFile("../../examples/sandboxpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var p v1alpha1.SandboxPolicy
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatal(err)
	}
	all := []v1alpha1.SandboxPolicy{p}
	if set, err := Select(all, map[string]string{"kubernetes.io/metadata.name": "default"}); err != nil || len(set) != 0 {
		t.Errorf("an unlabelled namespace is governed: %v, %v", set, err)
	}
	set, err := Select(all, map[string]string{"sandbox-fleet.io/sandbox-policy": "baseline"})
	if err != nil || len(set) != 1 {
		t.Fatalf("the labelled namespace: %v, %v", set, err)
	}
	pod := sandboxPod()
	changes, err := Mutate(pod, set, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if !strings.Contains(strings.Join(changes, "\n"), "capabilities.drop ALL") || pod.Spec.Affinity == nil ||
		c.Resources.Limits.Memory().String() != "32Gi" || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("the sample policy made %v: %+v", changes, pod.Spec)
	}
	for _, bad := range []func(*corev1.Pod){
		func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)}
		},
		func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 1, HostPort: 1}}
		},
		func(p *corev1.Pod) { p.Spec.HostPID = true },
	} {
		if _, err := Mutate(sandboxPod(bad), set, ""); err == nil {
			t.Error("the sample policy let a Pod out")
		}
	}
	// Fenced: DNS out, nothing in.
	np := NetworkPolicy(p, "rl")
	if np == nil || len(np.Spec.Egress) != 1 || len(np.Spec.Ingress) != 0 || np.Spec.Egress[0].Ports[0].Port.IntValue() != 53 {
		t.Errorf("the sample policy's NetworkPolicy: %+v, want DNS out and nothing in", np)
	}
}
