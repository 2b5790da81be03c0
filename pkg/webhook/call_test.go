package webhook

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// callMatcher compiles a CallCondition as the API server compiles a
// webhook's matchConditions, so the tests evaluate what it evaluates.
func callMatcher(t testing.TB, expr string) matchconditions.Matcher {
	t.Helper()
	compiler := plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	// The API server checks a configuration's expressions in the
	// environment for new ones, and evaluates them in the stored one.
	for _, env := range []environment.Type{environment.NewExpressions, environment.StoredExpressions} {
		filter := compiler.CompileCondition([]plugincel.ExpressionAccessor{&matchconditions.MatchCondition{Name: "needs-sandbox-policy", Expression: expr}},
			plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, env)
		fail := admissionregistrationv1.Fail
		m := matchconditions.NewMatcher(filter, &fail, "webhook", "admit", "test")
		if env == environment.StoredExpressions {
			return m
		}
		if r := m.Match(context.Background(), attributes(&corev1.Pod{}), nil, nil); r.Error != nil {
			t.Fatalf("%s does not compile: %v", expr, r.Error)
		}
	}
	return nil
}

func attributes(pod *corev1.Pod) *admission.VersionedAttributes {
	return updateAttributes(nil, pod, "")
}

// updateAttributes are those of an update of old to pod, of subresource
// if not "" (a creation of pod where old is nil).
func updateAttributes(old, pod *corev1.Pod, subresource string) *admission.VersionedAttributes {
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	op, opts, oldObject := admission.Create, runtime.Object(&metav1.CreateOptions{}), runtime.Object(nil)
	if old != nil {
		op, opts, oldObject = admission.Update, &metav1.UpdateOptions{}, old
	}
	attr := admission.NewAttributesRecord(pod, oldObject, gvk, pod.Namespace, pod.Name, corev1.SchemeGroupVersion.WithResource("pods"), subresource,
		op, opts, false, &user.DefaultInfo{Name: "system:serviceaccount:agent-sandbox-system:controller"})
	return &admission.VersionedAttributes{Attributes: attr, VersionedObject: pod, VersionedOldObject: oldObject, VersionedKind: gvk}
}

// calls reports whether the API server would call the webhook for pod.
func calls(t testing.TB, m matchconditions.Matcher, pod *corev1.Pod) bool {
	t.Helper()
	r := m.Match(context.Background(), attributes(pod), nil, nil)
	if r.Error != nil {
		t.Fatalf("evaluating the call condition: %v", r.Error)
	}
	return r.Matches
}

// runIDOf is the run id the webhook would find for pod: its label, or,
// for a Pod whose Sandbox the webhook would read, one found there.
func runIDOf(pod *corev1.Pod) string {
	if id := pod.Labels[fleetlabels.RunID]; id != "" {
		return id
	}
	if o := metav1.GetControllerOf(pod); o != nil && o.Kind == "Sandbox" {
		return "run-of-the-sandbox"
	}
	return ""
}

// callSets are policy sets covering every feature the condition judges.
func callSets() map[string]Set {
	caps := func(s *v1alpha1.SandboxPolicySpec) {
		s.MaxLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourceCPU: resource.MustParse("4")}
	}
	return map[string]Set{
		"mirror, caps": {policy("bench", 0, mirror, caps)},
		"gvisor, colocation, scheduler, two policies": {
			policy("high", 10, mirror, func(s *v1alpha1.SandboxPolicySpec) {
				s.RuntimeClassName, s.SchedulerName = "gvisor", "sandbox-fleet-scheduler"
				s.Colocation = &v1alpha1.ColocationPolicy{}
				s.Security = &v1alpha1.SecurityPolicy{AllowedCapabilities: []corev1.Capability{"NET_BIND_SERVICE", "SYS_PTRACE"}}
			}),
			policy("low", 0, caps, func(s *v1alpha1.SandboxPolicySpec) {
				s.Images = &v1alpha1.ImagePolicy{Rewrite: []v1alpha1.ImageRewrite{{From: "quay.io", To: "mirror.example.com/quay"}}}
				s.Security = &v1alpha1.SecurityPolicy{AllowedCapabilities: []corev1.Capability{"SYS_PTRACE"}}
			}),
		},
		// Images the folded check takes (repositories), and some it cannot
		// (Docker Hub, which overlaps its short forms; a second list).
		"repositories, two lists": {
			policy("hub", 1, func(s *v1alpha1.SandboxPolicySpec) {
				s.Images = &v1alpha1.ImagePolicy{Rewrite: []v1alpha1.ImageRewrite{{From: "quay.io", To: "mirror.example.com/quay"}},
					AllowedRegistries: []string{"mirror.example.com/hub", "mirror.example.com/quay/", "docker.io"}}
			}),
			policy("site", 0, func(s *v1alpha1.SandboxPolicySpec) {
				s.Images = &v1alpha1.ImagePolicy{AllowedRegistries: []string{"mirror.example.com", "docker.io"}}
			}),
		},
		"non-root, sysctls": {policy("strict", 0, mirror, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{RequireNonRoot: true, AllowedSysctls: []string{"kernel.msgmax", "net.core.*"},
				AllowedVolumeTypes: []string{"nfs", "csi"}}
		})},
		"permissive": {policy("open", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{AllowPrivileged: true, AllowHostNamespaces: true, AllowHostPath: true, AllowServiceAccountToken: true,
				AllowUnconfined: true, AllowHostPorts: true}
		})},
	}
}

func TestCallCondition(t *testing.T) {
	sets := callSets()
	compliant := func(set Set, edit ...func(*corev1.Pod)) *corev1.Pod {
		pod := compliantPod(t, set)
		for _, e := range edit {
			e(pod)
		}
		return pod
	}
	for _, tt := range []struct {
		name string
		set  string
		pod  *corev1.Pod
		want bool
	}{
		{"a Pod as made", "mirror, caps", sandboxPod(), true},
		{"a compliant Pod", "mirror, caps", compliant(sets["mirror, caps"]), false},
		{"a compliant Pod without a run id, owned by a Sandbox", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			delete(p.Labels, fleetlabels.RunID)
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "agents.x-k8s.io/v1beta1", Kind: "Sandbox", Name: "s", UID: "u", Controller: ptr(true)}}
		}), true},
		{"a compliant Pod without a run id or owner", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) { delete(p.Labels, fleetlabels.RunID) }), false},
		{"a compliant Pod whose image is not the mirror's", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "quay.io/a/b:1"
		}), true},
		{"a compliant Pod with a Docker Hub short name", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "mirror.example.com/hub/x:1"
			p.Spec.InitContainers = []corev1.Container{*p.Spec.Containers[0].DeepCopy()}
			p.Spec.InitContainers[0].Image = "busybox"
		}), true},
		{"a compliant Pod asking for privilege", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged = ptr(true)
		}), true},
		{"a compliant Pod above the memory cap", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("9Gi")
		}), true},
		{"a compliant Pod under the memory cap", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("8191Mi")
		}), false},
		{"a compliant Pod requesting above the cap", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4500m")
		}), true},
		{"a compliant Pod on the host network", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) { p.Spec.HostNetwork = true }), true},
		{"a compliant Pod with a hostPath volume", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}), true},
		{"a compliant Pod mounting its token", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }), true},
		{"a compliant Pod without seccomp", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
		}), true},
		{"a compliant Pod without AppArmor", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}), true},
		{"a compliant Pod with a localhost AppArmor profile", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr("sandbox")}
		}), false},
		{"a compliant Pod with the unconfined AppArmor annotation", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/sandbox": "unconfined"}
		}), true},
		{"a compliant Pod with another annotation", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/sandbox": "runtime/default", "a": "unconfined"}
		}), false},
		{"a compliant container without seccomp", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}), true},
		{"a compliant container with an unmasked /proc", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.ProcMount = ptr(corev1.UnmaskedProcMount)
		}), true},
		{"a compliant container on a host port", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		}), true},
		{"a compliant container with a port", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}}
		}), false},
		{"a compliant ephemeral container", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(*p.Spec.Containers[0].DeepCopy())}}
			p.Spec.EphemeralContainers[0].Name = "debug"
			p.Spec.EphemeralContainers[0].Resources = corev1.ResourceRequirements{}
		}), false},
		{"an image volume from the mirror", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "mirror.example.com/hub/tools:1"}}}}
		}), false},
		{"an image volume from elsewhere", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "evil.example/tools:1"}}}}
		}), true},
		{"an image volume Docker Hub's rule rewrites", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "docker.io/library/busybox:1"}}}}
		}), true},
		{"a projected token", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		}), true},
		{"the API server's token volume", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		}), true},
		{"a projected config map", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}}}}}}}}
		}), false},
		{"another service account", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) { p.Spec.ServiceAccountName = "deployer" }), true},
		{"the default service account", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) { p.Spec.ServiceAccountName = "default" }), false},
		{"an unconfined SELinux type", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}), true},
		{"a container SELinux type", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c1,c2"}
		}), false},
		{"a Windows host process", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr(true)}
		}), true},
		{"a safe sysctl", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65535"}}
		}), false},
		{"an unsafe sysctl", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "1"}}
		}), true},
		{"the strict policy's compliant Pod", "non-root, sysctls", compliant(sets["non-root, sysctls"]), false},
		{"root in a container", "non-root, sysctls", compliant(sets["non-root, sysctls"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.RunAsUser = ptr(int64(0))
		}), true},
		{"a non-root user", "non-root, sysctls", compliant(sets["non-root, sysctls"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.RunAsUser = ptr(int64(1000))
		}), false},
		{"runAsNonRoot unset", "non-root, sysctls", compliant(sets["non-root, sysctls"], func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsNonRoot = nil }), true},
		{"allowed sysctls", "non-root, sysctls", compliant(sets["non-root, sysctls"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "1"}, {Name: "net.core.somaxconn", Value: "1024"}}
		}), false},
		{"a sysctl outside the allowed", "non-root, sysctls", compliant(sets["non-root, sysctls"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.sem", Value: "1"}}
		}), true},
		{"an ephemeral container keeping its capabilities", "mirror, caps", compliant(sets["mirror, caps"], func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(*p.Spec.Containers[0].DeepCopy())}}
			p.Spec.EphemeralContainers[0].Name = "debug"
			p.Spec.EphemeralContainers[0].SecurityContext.Capabilities = nil
		}), true},
		{"the policies' compliant Pod", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"]), false},
		{"adding a capability both allow", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_PTRACE"}
		}), false},
		{"adding a capability one allows", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
		}), true},
		{"colocation from the template's label", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Labels[ColocateLabel] = "tmpl"
			p.Spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels = map[string]string{ColocateLabel: "tmpl"}
		}), false},
		{"a template label without its term", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Labels[ColocateLabel] = "tmpl"
		}), true},
		{"another template's colocation", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Labels[TemplateRefHashLabel] = "other"
		}), true},
		{"another runtime class", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Spec.RuntimeClassName = ptr("runc")
		}), true},
		{"the default scheduler", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Spec.SchedulerName = corev1.DefaultSchedulerName
		}), true},
		{"a scheduler of its own", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Spec.SchedulerName = "mine"
		}), true},
		{"the eviction tolerations the API server adds", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))}}
		}), false},
		{"a toleration of the control plane", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}}
		}), true},
		{"a quay image the low policy rewrites", "gvisor, colocation, scheduler, two policies", compliant(sets["gvisor, colocation, scheduler, two policies"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "quay.io/a/b:1"
		}), true},
		{"the repositories' compliant Pod", "repositories, two lists", compliant(sets["repositories, two lists"]), false},
		{"a repository's own image", "repositories, two lists", compliant(sets["repositories, two lists"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "mirror.example.com/hub:1"
		}), false},
		{"an image beside a repository", "repositories, two lists", compliant(sets["repositories, two lists"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "mirror.example.com/hubx/a:1"
		}), true},
		{"an image under a rewritten repository", "repositories, two lists", compliant(sets["repositories, two lists"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "quay.io/a/b:1"
		}), true},
		{"a Docker Hub library image", "repositories, two lists", compliant(sets["repositories, two lists"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "docker.io/library/busybox:1.36"
		}), false},
		{"a Docker Hub short form", "repositories, two lists", compliant(sets["repositories, two lists"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "docker.io/busybox:1.36"
		}), true},
		{"privileged where allowed", "permissive", compliant(sets["permissive"], func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged = ptr(true)
			p.Spec.HostPID = true
		}), false},
		{"unconfined on a host port where allowed", "permissive", compliant(sets["permissive"], func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
			p.Spec.Containers[0].SecurityContext.ProcMount = ptr(corev1.UnmaskedProcMount)
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/sandbox": "unconfined"}
		}), false},
		{"an image without a tag", "permissive", compliant(sets["permissive"], func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "registry.example.com/a/b"
		}), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := sets[tt.set]
			m := callMatcher(t, CallCondition(set))
			if got := calls(t, m, tt.pod); got != tt.want {
				t.Fatalf("calls the webhook: %v, want %v", got, tt.want)
			}
			changes, err := Mutate(tt.pod.DeepCopy(), set, runIDOf(tt.pod))
			if !tt.want && (err != nil || len(changes) > 0) {
				t.Errorf("the webhook is not called, but it would change %v (%v)", changes, err)
			}
			if tt.want && err == nil && len(changes) == 0 && tt.pod.Labels[fleetlabels.RunID] != "" {
				t.Logf("called for a Pod the webhook leaves as it is (the condition errs toward calling)")
			}
		})
	}
}

// TestUpdateConditions: an update of a Pod is sent when it changes an
// image or takes the sandbox label away, and then only where the
// policies' condition finds it needs them; subresources are always sent
// to the policies' condition, which judges a resize by the caps.
func TestUpdateConditions(t *testing.T) {
	set := callSets()["mirror, caps"]
	update, policies := callMatcher(t, UpdateCondition), callMatcher(t, CallCondition(set))
	admitted := compliantPod(t, set)
	edited := func(edit func(*corev1.Pod)) *corev1.Pod {
		pod := admitted.DeepCopy()
		edit(pod)
		return pod
	}
	match := func(t *testing.T, m matchconditions.Matcher, attr *admission.VersionedAttributes) bool {
		t.Helper()
		r := m.Match(context.Background(), attr, nil, nil)
		if r.Error != nil {
			t.Fatalf("evaluating: %v", r.Error)
		}
		return r.Matches
	}
	for _, tt := range []struct {
		name        string
		pod         *corev1.Pod
		subresource string
		want        bool
	}{
		{"a label the controller adds", edited(func(p *corev1.Pod) { p.Labels["agents.x-k8s.io/claimed"] = "yes" }), "", false},
		{"an annotation", edited(func(p *corev1.Pod) { p.Annotations = map[string]string{"note": "x"} }), "", false},
		{"an image from elsewhere", edited(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil.example/x:1" }), "", true},
		{"an image the mirror would serve", edited(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "docker.io/library/busybox:1" }), "", true},
		{"an image from the mirror", edited(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "mirror.example.com/hub/library/busybox:1" }), "", false},
		{"the sandbox label taken away", edited(func(p *corev1.Pod) { delete(p.Labels, SandboxPodLabel) }), "", true},
		{"a toleration of the control plane added", edited(func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists})
		}), "", true},
		{"an eviction toleration added", edited(func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
		}), "", false},
		{"a resize within the caps", edited(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("4Gi")
		}), "resize", false},
		{"a resize past the caps", edited(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("16Gi")
		}), "resize", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			attr := updateAttributes(admitted, tt.pod, tt.subresource)
			if got := match(t, update, attr) && match(t, policies, attr); got != tt.want {
				t.Errorf("calls the webhook: %v, want %v", got, tt.want)
			}
			if tt.want {
				return
			}
			// Not sent: the webhook would have changed and refused nothing.
			if tt.subresource == "resize" {
				if d := CheckResize(tt.pod, set); d != nil {
					t.Errorf("not sent, but CheckResize refuses: %v", d)
				}
			} else if changes, err := MutateUpdate(admitted, tt.pod.DeepCopy(), set); err != nil || len(changes) > 0 {
				t.Errorf("not sent, but MutateUpdate would change %v (%v)", changes, err)
			}
		})
	}
	if !match(t, update, attributes(admitted)) {
		t.Error("the update condition keeps a creation from the webhook")
	}
	// The sandbox label added by an update (the Pod's creator, or the
	// controller adopting it): sent unless the Pod is already as the
	// policies make one (MutateUpdate then judges it as a creation).
	raw := sandboxPod(func(p *corev1.Pod) { p.Labels[fleetlabels.RunID] = "run-1" })
	for _, tt := range []struct {
		name     string
		old, pod *corev1.Pod
		want     bool
	}{
		{"the sandbox label added to a Pod never checked", withoutSandboxLabel(raw), raw, true},
		{"the sandbox label added to a Pod as the policies make one", withoutSandboxLabel(admitted), admitted, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			attr := updateAttributes(tt.old, tt.pod, "")
			if got := match(t, update, attr) && match(t, policies, attr); got != tt.want {
				t.Errorf("calls the webhook: %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCallConditionAlways: what CEL cannot judge is always left to the
// webhook, and namespaces without policy never call it.
func TestCallConditionAlways(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  Set
		want string
	}{
		{"no policy", nil, "false"},
		{"node-cache affinity", Set{policy("p", 0, func(s *v1alpha1.SandboxPolicySpec) { s.NodeCache = &v1alpha1.NodeCachePolicy{} })}, "true"},
		{"network isolation", Set{policy("p", 0, func(s *v1alpha1.SandboxPolicySpec) { s.Network = &v1alpha1.NetworkIsolation{} })}, "true"},
		{"conflicting runtime classes", Set{
			policy("a", 0, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "gvisor" }),
			policy("b", 0, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "kata" }),
		}, "true"},
		{"runtime classes at two priorities", Set{
			policy("a", 1, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "gvisor" }),
			policy("b", 0, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "kata" }),
		}, "true"},
		{"conflicting schedulers", Set{
			policy("a", 0, func(s *v1alpha1.SandboxPolicySpec) { s.SchedulerName = "x" }),
			policy("b", 0, func(s *v1alpha1.SandboxPolicySpec) { s.SchedulerName = "y" }),
		}, "true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := CallCondition(tt.set); got != tt.want {
				t.Errorf("CallCondition = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestCanonicalImage: an image the pattern matches is one Normalize
// leaves as it is.
func TestCanonicalImage(t *testing.T) {
	re := regexp.MustCompile(CanonicalImage)
	for _, tt := range []struct {
		image string
		want  bool
	}{
		{"mirror.example.com/hub/swebench/sweb.eval.x86_64.django__django-11099:latest", true},
		{"localhost:5000/a:1", true},
		{"registry:5000/a/b@sha256:" + sha, true},
		{"docker.io/library/busybox:1.36", true},
		{"busybox:1.36", false},
		{"mirror.example.com/a", false},
		{"Mirror.example.com/a:1", false},
		{"mirror.example.com/A:1", false},
		{"mirror.example.com/a:1@sha256:" + sha, false},
		{"mirror.example.com//a:1", false},
		{"mirror.example.com/a:-1", false},
	} {
		if got := re.MatchString(tt.image); got != tt.want {
			t.Errorf("%s: matched %v, want %v", tt.image, got, tt.want)
		}
		if tt.want {
			if n, err := images.Normalize(tt.image); err != nil || n != tt.image {
				t.Errorf("%s normalises to %s (%v)", tt.image, n, err)
			}
		}
	}
}

// TestImageChecks: the image checks fold into one regular expression
// where the allowed prefixes let them, and keep what they cannot fold.
// TestCallConditionWithin: the condition judges registries as
// images.Within does, over the table that tests Within: a Pod whose
// image, normalised, lies within the allowed prefix needs no call; one
// outside is always sent.
func TestCallConditionWithin(t *testing.T) {
	data, err := os.ReadFile("../images/testdata/within.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Image, Prefix string
		Within        bool
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, tt := range cases {
		set := Set{policy("allow", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Images = &v1alpha1.ImagePolicy{AllowedRegistries: []string{tt.Prefix}}
		})}
		image, err := images.Normalize(tt.Image)
		if err != nil {
			t.Fatal(err)
		}
		pod := compliantPod(t, Set{policy("allow", 0)})
		pod.Spec.Containers[0].Image = image
		if got := calls(t, callMatcher(t, CallCondition(set)), pod); got == tt.Within {
			t.Errorf("image %s, allowed %s: calls the webhook %v, but Within says %v", image, tt.Prefix, got, tt.Within)
		}
		if _, err := Mutate(pod.DeepCopy(), set, runIDOf(pod)); (err == nil) != tt.Within {
			t.Errorf("image %s, allowed %s: Mutate says %v, but Within says %v", image, tt.Prefix, err, tt.Within)
		}
	}
}

func TestImageChecks(t *testing.T) {
	for _, tt := range []struct {
		name    string
		allowed [][]string
		froms   []string
		want    int
	}{
		{"nothing allowed: canonical, not rewritten", nil, []string{"docker.io"}, 2},
		{"a mirror apart from the sources", [][]string{{"mirror.example.com"}}, []string{"docker.io"}, 1},
		{"a repository apart from the sources", [][]string{{"mirror.example.com/hub"}}, nil, 1},
		{"a mirror a source lies under", [][]string{{"mirror.example.com"}}, []string{"mirror.example.com/old"}, 2},
		{"Docker Hub, whose short forms are rewritten", [][]string{{"docker.io"}}, nil, 2},
		{"a second policy's list", [][]string{{"mirror.example.com"}, {"mirror.example.com/hub"}}, nil, 2},
		{"no prefix the fold takes", [][]string{{"Mirror.example.com"}}, nil, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := imageChecks(tt.allowed, tt.froms); len(got) != tt.want {
				t.Errorf("%d checks, want %d: %v", len(got), tt.want, got)
			}
		})
	}
}

const sha = "4f2d0e4a0b1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef01234567"

// securityEdits make a Pod ask for what a policy may refuse: unconfined
// profiles, an unmasked /proc, a host port, an ephemeral container,
// volumes the node mounts, a node by name, the cluster's priority, a Pod
// over a cap with all its containers or its pod-level limit.
var securityEdits = []func(*corev1.Pod){
	func(p *corev1.Pod) {
		p.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
	},
	func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		p.Spec.Containers[0].SecurityContext.ProcMount = ptr(corev1.UnmaskedProcMount)
	},
	func(p *corev1.Pod) {
		p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/sandbox": "unconfined"}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
	},
	func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(*p.Spec.Containers[0].DeepCopy())}}
		p.Spec.EphemeralContainers[0].Name = "debug"
	},
	func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.1", Path: "/"}}})
	},
	func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "x"}}},
			corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	},
	func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "git", VolumeSource: corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "r"}}})
	},
	func(p *corev1.Pod) { p.Spec.NodeName = "control-plane" },
	func(p *corev1.Pod) {
		p.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
	},
	func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Role: "system_r"}
	},
	func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" },
	func(p *corev1.Pod) { p.Spec.PriorityClassName = "batch" },
	func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		p.Spec.SchedulerName = "mine"
	},
	func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	},
	// Two containers each within a cap, over it together; a pod-level
	// limit above it.
	func(p *corev1.Pod) {
		second := *p.Spec.Containers[0].DeepCopy()
		second.Name = "second"
		p.Spec.Containers = append(p.Spec.Containers, second)
	},
	func(p *corev1.Pod) {
		p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi")}}
	},
}
