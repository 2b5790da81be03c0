package webhook

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// sandboxPod is a Pod as the Agent Sandbox controller creates it for a
// warm pool's sandbox.
func sandboxPod(edit ...func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-abc12", Namespace: "rl", Labels: map[string]string{
			"agents.x-k8s.io/sandbox-name-hash": "1a2b3c", TemplateRefHashLabel: "9f8e7d",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "sandbox", Image: "docker.io/swebench/sweb.eval.x86_64.django__django-11099:latest",
			Command:   []string{"sleep", "infinity"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
		}}},
	}
	for _, e := range edit {
		e(pod)
	}
	return pod
}

func policy(name string, priority int32, edit ...func(*v1alpha1.SandboxPolicySpec)) v1alpha1.SandboxPolicy {
	p := v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SandboxPolicySpec{Priority: priority}}
	for _, e := range edit {
		e(&p.Spec)
	}
	return p
}

func mirror(s *v1alpha1.SandboxPolicySpec) {
	s.Images = &v1alpha1.ImagePolicy{
		Rewrite:           []v1alpha1.ImageRewrite{{From: "docker.io", To: "mirror.example.com/hub"}},
		AllowedRegistries: []string{"mirror.example.com"},
	}
}

func TestMutate(t *testing.T) {
	for _, tt := range []struct {
		name   string
		pod    *corev1.Pod
		set    Set
		runID  string
		denied string // the denial, when the Pod is refused
	}{
		{name: "no-policy", pod: sandboxPod()},
		{name: "security-defaults", pod: sandboxPod(), set: Set{policy("baseline", 0)}},
		{name: "mirror-and-run-label", pod: sandboxPod(), set: Set{policy("mirror", 0, mirror)}, runID: "run-7"},
		{name: "gvisor-caps-colocation", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox:1.36"}}
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}), set: Set{
			policy("gvisor", 10, func(s *v1alpha1.SandboxPolicySpec) {
				s.RuntimeClassName = "gvisor"
				s.MaxLimits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
				s.Colocation = &v1alpha1.ColocationPolicy{Weight: 80}
			}),
			policy("tight-memory", 0, func(s *v1alpha1.SandboxPolicySpec) {
				s.MaxLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
				s.Security = &v1alpha1.SecurityPolicy{AllowServiceAccountToken: true}
			}),
		}},
		{name: "colocation-by-template-label", pod: sandboxPod(func(p *corev1.Pod) { p.Labels[ColocateLabel] = "swe-django" }),
			set: Set{policy("colocate", 0, func(s *v1alpha1.SandboxPolicySpec) { s.Colocation = &v1alpha1.ColocationPolicy{} })}},
		{name: "allowed-capability-kept", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
			p.Labels["sandbox-fleet.io/run-id"] = "mine"
		}), set: Set{policy("caps", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{AllowedCapabilities: []corev1.Capability{"NET_BIND_SERVICE"}}
		})}, runID: "theirs"},
		{name: "scheduler-name", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.SchedulerName = corev1.DefaultSchedulerName }),
			set: Set{policy("node-cache", 0, func(s *v1alpha1.SandboxPolicySpec) { s.SchedulerName = "sandbox-fleet-scheduler" })}},
		{name: "own-scheduler-kept", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.SchedulerName = "gang-scheduler" }),
			set: Set{policy("node-cache", 0, func(s *v1alpha1.SandboxPolicySpec) {
				s.SchedulerName = "sandbox-fleet-scheduler"
				s.Security = &v1alpha1.SecurityPolicy{AllowedSchedulerNames: []string{"gang-scheduler"}}
			})}},
		{name: "own-scheduler-denied", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.SchedulerName = "gang-scheduler" }),
			set:    Set{policy("node-cache", 0, func(s *v1alpha1.SandboxPolicySpec) { s.SchedulerName = "sandbox-fleet-scheduler" })},
			denied: `denied by SandboxPolicy "node-cache": spec.schedulerName: scheduler gang-scheduler is neither the cluster's default, the policies' (spec.schedulerName) nor in spec.security.allowedSchedulerNames []`},
		{name: "toleration-of-the-control-plane", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.tolerations[0]: tolerating taint node-role.kubernetes.io/control-plane would let the sandbox onto nodes its taint keeps Pods off`},
		{name: "toleration-of-every-taint", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}), set: Set{policy("sandbox-pool", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{AllowedTolerationKeys: []string{"sandbox-fleet.io/sandbox-node"}}
		})}, denied: `denied by SandboxPolicy "sandbox-pool": spec.tolerations[0]: tolerating every taint`},
		{name: "tolerations-allowed", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{
				{Key: "sandbox-fleet.io/sandbox-node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			}
		}), set: Set{policy("sandbox-pool", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{AllowedTolerationKeys: []string{"sandbox-fleet.io/sandbox-node"}}
		})}},
		{name: "scheduler-conflict", pod: sandboxPod(), set: Set{
			policy("a", 5, func(s *v1alpha1.SandboxPolicySpec) { s.SchedulerName = "sandbox-fleet-scheduler" }),
			policy("b", 5, func(s *v1alpha1.SandboxPolicySpec) { s.SchedulerName = "volcano" }),
		}, denied: `denied by SandboxPolicy "a" and "b": spec.schedulerName: the policies conflict`},
		{name: "host-network", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.hostNetwork: host namespaces are not allowed for sandboxes (spec.security.allowHostNamespaces)`},
		{name: "host-path", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "docker", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/docker.sock"}}}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.volumes[0].hostPath: hostPath volumes are not allowed`},
		{name: "nfs-volume", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.1", Path: "/"}}}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.volumes[0].nfs: nfs volumes are mounted by the node itself, and nfs is not in spec.security.allowedVolumeTypes []`},
		{name: "git-repo-volume", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "src", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "repo", VolumeSource: corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/r.git"}}}}
		}), set: Set{policy("nfs", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{AllowedVolumeTypes: []string{"nfs"}}
		})},
			denied: `denied by SandboxPolicy "nfs": spec.volumes[1].gitRepo: gitRepo volumes are mounted by the node itself, and gitRepo is not in spec.security.allowedVolumeTypes [nfs]`},
		{name: "nfs-volume-allowed", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.1", Path: "/"}}}}
		}), set: Set{policy("nfs", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{AllowedVolumeTypes: []string{"nfs"}}
		})}},
		{name: "selinux-user", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{User: "system_u"}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.securityContext.seLinuxOptions.user: the Unconfined profile is not allowed`},
		{name: "selinux-role", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Role: "system_r"}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].securityContext.seLinuxOptions.role: the Unconfined profile is not allowed`},
		{name: "node-name", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.NodeName = "control-plane" }), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.nodeName: sandboxes are placed by the scheduler`},
		{name: "system-priority", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" }), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.priorityClassName: priority class system-node-critical is the cluster's own, not a sandbox's`},
		{name: "privileged", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].securityContext.privileged: privileged containers are not allowed`},
		{name: "capability", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].securityContext.capabilities.add: capability SYS_ADMIN is not in spec.security.allowedCapabilities []`},
		{name: "seccomp-unconfined-pod", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.securityContext.seccompProfile.type: the Unconfined profile is not allowed for sandboxes (spec.security.allowUnconfined)`},
		{name: "seccomp-unconfined-container", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].securityContext.seccompProfile.type: the Unconfined profile`},
		{name: "apparmor-unconfined-pod", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.securityContext.appArmorProfile.type: the Unconfined profile`},
		{name: "apparmor-unconfined-container", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].securityContext.appArmorProfile.type: the Unconfined profile`},
		{name: "apparmor-unconfined-annotation", pod: sandboxPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/sandbox": "unconfined"}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": metadata.annotations[container.apparmor.security.beta.kubernetes.io/sandbox]: the Unconfined profile`},
		{name: "unmasked-proc", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: ptr(corev1.UnmaskedProcMount)}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].securityContext.procMount: an unmasked /proc is not allowed`},
		{name: "host-port", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 22, HostPort: 2222}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].ports[1].hostPort: host ports are not allowed for sandboxes (spec.security.allowHostPorts)`},
		{name: "privileged-ephemeral-container", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox:1.36", SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)}}}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.ephemeralContainers[0].securityContext.privileged: privileged containers are not allowed`},
		{name: "unconfined-and-host-ports-allowed", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: ptr(corev1.UnmaskedProcMount),
				AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 2222}}
		}), set: Set{policy("open", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{AllowUnconfined: true, AllowHostPorts: true}
		})}},
		{name: "registry", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "ghcr.io/someone/agent:1" }), set: Set{policy("mirror", 0, mirror)},
			denied: `denied by SandboxPolicy "mirror": spec.containers[0].image: image ghcr.io/someone/agent:1 is not from an allowed registry [mirror.example.com]`},
		{name: "runtime-class", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr("runc") }),
			set:    Set{policy("gvisor", 0, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "gvisor" })},
			denied: `denied by SandboxPolicy "gvisor": spec.runtimeClassName: sandboxes must use runtime class "gvisor", not "runc"`},
		{name: "conflict", pod: sandboxPod(), set: Set{
			policy("a-gvisor", 5, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "gvisor" }),
			policy("b-kata", 5, func(s *v1alpha1.SandboxPolicySpec) { s.RuntimeClassName = "kata" }),
		}, denied: `denied by SandboxPolicy "a-gvisor" and "b-kata": spec.runtimeClassName: the policies conflict ("gvisor" against "kata" at the same priority 5); give one a higher spec.priority`},
		{name: "image-volume-outside-registries", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "evil.example/tools:1"}}}}
		}), set: Set{policy("mirror", 0, mirror)},
			denied: `denied by SandboxPolicy "mirror": spec.volumes[0].image.reference: image evil.example/tools:1 is not from an allowed registry [mirror.example.com]`},
		{name: "image-volume-rewritten", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "busybox:1.36"}}}}
		}), set: Set{policy("mirror", 0, mirror)}},
		{name: "other-port-of-an-allowed-registry", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "mirror.example.com:5000/x:1" }),
			set:    Set{policy("mirror", 0, mirror)},
			denied: `denied by SandboxPolicy "mirror": spec.containers[0].image: image mirror.example.com:5000/x:1 is not from an allowed registry`},
		{name: "upper-case-host-rewritten", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "Docker.io/library/busybox:1.36" }),
			set: Set{policy("mirror", 0, mirror)}},
		{name: "projected-token", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}}},
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.volumes[0].projected.sources[1].serviceAccountToken: service account tokens are not allowed`},
		{name: "injected-token-removed", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3607))}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}}}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
		}), set: Set{policy("baseline", 0)}},
		{name: "service-account", pod: sandboxPod(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "deployer" }), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.serviceAccountName: sandboxes run as their namespace's default service account, not "deployer"`},
		{name: "selinux-spc", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].securityContext.seLinuxOptions.type: the Unconfined profile`},
		{name: "selinux-spc-pod", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.securityContext.seLinuxOptions.type: the Unconfined profile`},
		{name: "host-process", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr(true)}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.containers[0].securityContext.windowsOptions.hostProcess: Windows host processes are not allowed`},
		{name: "unsafe-sysctl", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}, {Name: "kernel.msgmax", Value: "1"}}}
		}), set: Set{policy("baseline", 0)},
			denied: `denied by SandboxPolicy "baseline": spec.securityContext.sysctls[1]: sysctl kernel.msgmax is neither safe nor in spec.security.allowedSysctls []`},
		{name: "allowed-sysctls", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net/ipv4/tcp_syncookies", Value: "1"}, {Name: "kernel.msgmax", Value: "1"}, {Name: "net.core.somaxconn", Value: "1024"}}}
		}), set: Set{policy("sysctls", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{AllowedSysctls: []string{"kernel.msgmax", "net.core.*"}}
		})}},
		{name: "non-root", pod: sandboxPod(), set: Set{policy("non-root", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Security = &v1alpha1.SecurityPolicy{RequireNonRoot: true}
		})}},
		{name: "root-user", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr(int64(0))}
		}), set: Set{policy("non-root", 0, func(s *v1alpha1.SandboxPolicySpec) { s.Security = &v1alpha1.SecurityPolicy{RequireNonRoot: true} })},
			denied: `denied by SandboxPolicy "non-root": spec.containers[0].securityContext.runAsUser: sandboxes must not run as root (spec.security.requireNonRoot)`},
		{name: "root-allowed-pod", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr(false)}
		}), set: Set{policy("non-root", 0, func(s *v1alpha1.SandboxPolicySpec) { s.Security = &v1alpha1.SecurityPolicy{RequireNonRoot: true} })},
			denied: `denied by SandboxPolicy "non-root": spec.securityContext.runAsNonRoot: sandboxes must not run as root`},
		{name: "limit-above-cap", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
		}), set: Set{policy("caps", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.MaxLimits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
		})}, denied: `denied by SandboxPolicy "caps": spec.containers[0].resources.limits.cpu: 8 is above the cap of 4 (spec.maxLimits)`},
		{name: "two-containers-above-cap-together", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "second", Image: p.Spec.Containers[0].Image,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}})
		}), set: Set{policy("caps", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.MaxLimits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
		})}, denied: `denied by SandboxPolicy "caps": spec.containers[*].resources.limits.cpu: the Pod's containers together may use 6, above the cap of 4 on a sandbox`},
		{name: "a-second-container-without-limits", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "second", Image: p.Spec.Containers[0].Image})
		}), set: Set{policy("caps", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.MaxLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}
		})}, denied: `denied by SandboxPolicy "caps": spec.containers[*].resources.limits.memory: the Pod's containers together may use 16Gi, above the cap of 8Gi`},
		{name: "pod-level-limit-above-cap", pod: sandboxPod(func(p *corev1.Pod) {
			p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi")}}
		}), set: Set{policy("caps", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.MaxLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}
		})}, denied: `denied by SandboxPolicy "caps": spec.resources.limits.memory: 64Gi is above the cap of 8Gi on a sandbox (spec.maxLimits)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod.DeepCopy()
			changes, err := Mutate(pod, tt.set, tt.runID)
			if tt.denied != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.denied) {
					t.Fatalf("error %v, want a denial starting %q", err, tt.denied)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, "mutate-"+tt.name, "# changes:\n#   "+strings.Join(changes, "\n#   ")+"\n"+string(out))

			again := pod.DeepCopy()
			if more, err := Mutate(again, tt.set, tt.runID); err != nil || len(more) > 0 || !equality.Semantic.DeepEqual(again, pod) {
				t.Errorf("a second admission changed %v (%v)", more, err)
			}
		})
	}
}

// An update may change a Pod's images and labels: each new image is
// rewritten and checked, the sandbox label kept.
func TestMutateUpdate(t *testing.T) {
	set := Set{policy("mirror", 0, mirror)}
	admitted := sandboxPod()
	if _, err := Mutate(admitted, set, "run-1"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		edit    func(*corev1.Pod)
		changes []string
		denied  string
	}{
		{"a label", func(p *corev1.Pod) { p.Labels["x"] = "y" }, nil, ""},
		{"an image the mirror serves", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "busybox:1.36" },
			[]string{"spec.containers[0].image busybox:1.36 → mirror.example.com/hub/library/busybox:1.36"}, ""},
		{"an image from the mirror", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "mirror.example.com/hub/x:2" }, nil, ""},
		{"an image from elsewhere", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil.example/x:1" }, nil,
			`denied by SandboxPolicy "mirror": spec.containers[0].image: image evil.example/x:1 is not from an allowed registry [mirror.example.com]`},
		{"the sandbox label removed", func(p *corev1.Pod) { delete(p.Labels, SandboxPodLabel) }, nil,
			`denied by SandboxPolicy "mirror": metadata.labels[agents.x-k8s.io/sandbox-name-hash]: a sandbox Pod in a namespace a SandboxPolicy governs keeps`},
		{"a toleration of the control plane added", func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists})
		}, nil, `denied by SandboxPolicy "mirror": spec.tolerations[0]: tolerating taint node-role.kubernetes.io/control-plane`},
		{"an eviction toleration added", func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
		}, nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := admitted.DeepCopy()
			tt.edit(pod)
			changes := checkUpdate(t, admitted, pod, set, tt.changes, tt.denied)
			if len(changes) > 0 && pod.Annotations[fleetlabels.OriginalImage] != "busybox:1.36" {
				t.Errorf("the original image is not recorded: %v", pod.Annotations)
			}
		})
	}
}

// An update that makes a Pod a sandbox Pod — the label added by its
// creator, or by the Agent Sandbox controller adopting it — passes only
// when the Pod is already as the policies make one at creation; its
// images are judged as new, and rewritten.
func TestMutateUpdateMakingASandboxPod(t *testing.T) {
	set := Set{policy("mirror", 0, mirror)}
	admitted := sandboxPod()
	if _, err := Mutate(admitted, set, ""); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		pod     *corev1.Pod
		changes []string
		denied  string
	}{
		{"never checked", sandboxPod(), nil,
			`denied by SandboxPolicy "mirror": spec.automountServiceAccountToken: a Pod becomes a sandbox Pod (agents.x-k8s.io/sandbox-name-hash added, or adopted by the Agent Sandbox controller) only as the policies make one at creation, which it cannot become by an update; create it with spec.automountServiceAccountToken false, spec.securityContext.seccompProfile RuntimeDefault`},
		{"as the policies make one", admitted, nil, ""},
		{"as they make one, and scheduled", func() *corev1.Pod {
			p := admitted.DeepCopy()
			p.Spec.NodeName = "node-1"
			return p
		}(), nil, ""},
		{"as they make one, its image not yet the mirror's", func() *corev1.Pod {
			p := admitted.DeepCopy()
			p.Spec.Containers[0].Image = "busybox:1.36"
			return p
		}(), []string{"spec.containers[0].image busybox:1.36 → mirror.example.com/hub/library/busybox:1.36"}, ""},
		{"as they make one, its image from elsewhere", func() *corev1.Pod {
			p := admitted.DeepCopy()
			p.Spec.Containers[0].Image = "evil.example/x:1"
			return p
		}(), nil, `denied by SandboxPolicy "mirror": spec.containers[0].image: image evil.example/x:1 is not from an allowed registry`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkUpdate(t, withoutSandboxLabel(tt.pod), tt.pod.DeepCopy(), set, tt.changes, tt.denied)
		})
	}
}

// checkUpdate runs MutateUpdate from old to pod and fails unless it is
// refused with a denial starting denied, or (denied "") makes changes.
func checkUpdate(t *testing.T, old, pod *corev1.Pod, set Set, changes []string, denied string) []string {
	t.Helper()
	got, err := MutateUpdate(old, pod, set)
	if denied != "" {
		if err == nil || !strings.HasPrefix(err.Error(), denied) {
			t.Fatalf("error %v, want a denial starting %q", err, denied)
		}
		return nil
	}
	if err != nil || !slices.Equal(got, changes) {
		t.Fatalf("MutateUpdate = %q, %v; want %q", got, err, changes)
	}
	return got
}

// withoutSandboxLabel is a copy of p as it was before an update added
// the sandbox label.
func withoutSandboxLabel(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	delete(p.Labels, SandboxPodLabel)
	return p
}

// Whatever Pod arrives, Mutate does not panic, and a Pod it admits is
// admitted again unchanged.
func FuzzMutate(f *testing.F) {
	for _, pod := range []*corev1.Pod{sandboxPod(), sandboxPod(func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}}
	})} {
		b, _ := json.Marshal(pod)
		f.Add(b)
	}
	f.Add([]byte(`{"spec":{"containers":[{"image":"::bad::"}]}}`))
	f.Add([]byte(`{"metadata":{"labels":{"agents.x-k8s.io/sandbox-template-ref-hash":"x"}},"spec":{"affinity":{"podAffinity":{}}}}`))
	f.Add([]byte(`{"spec":{"securityContext":{"appArmorProfile":{"type":"RuntimeDefault"}},"containers":[{"image":"busybox","ports":[{"containerPort":1}]}],` +
		`"ephemeralContainers":[{"name":"debug","image":"busybox","securityContext":{"seccompProfile":{"type":"RuntimeDefault"},"procMount":"Default"}}]}}`))
	set := Set{
		policy("high", 10, mirror, func(s *v1alpha1.SandboxPolicySpec) {
			s.RuntimeClassName = "gvisor"
			s.Colocation = &v1alpha1.ColocationPolicy{}
			s.MaxLimits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}
		}),
		policy("low", 0, func(s *v1alpha1.SandboxPolicySpec) {
			s.Images = &v1alpha1.ImagePolicy{Rewrite: []v1alpha1.ImageRewrite{{From: "quay.io", To: "mirror.example.com/quay"}}}
		}),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pod := &corev1.Pod{}
		if json.Unmarshal(data, pod) != nil {
			return
		}
		if _, err := Mutate(pod, set, "run"); err != nil {
			return
		}
		again := pod.DeepCopy()
		if more, err := Mutate(again, set, "run"); err != nil || len(more) > 0 {
			t.Errorf("a second admission of %s changed %v (%v)", data, more, err)
		}
	})
}

func TestAddNodeCacheAffinity(t *testing.T) {
	const gib = 1 << 30
	// terms are one per node, with its weight.
	terms := func(nodes ...any) []corev1.PreferredSchedulingTerm {
		var out []corev1.PreferredSchedulingTerm
		for i := 0; i < len(nodes); i += 2 {
			out = append(out, corev1.PreferredSchedulingTerm{Weight: int32(nodes[i+1].(int)), Preference: corev1.NodeSelectorTerm{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodes[i].(string)}}}}})
		}
		return out
	}
	many := map[string]int64{}
	var first20 []any
	for i := range 25 {
		name := fmt.Sprintf("node-%02d", i)
		many[name] = 0
		if i < 20 {
			first20 = append(first20, name, 40)
		}
	}
	for _, tt := range []struct {
		name    string
		pod     *corev1.Pod
		weight  int32
		missing map[string]int64
		total   int64
		want    []corev1.PreferredSchedulingTerm // nil: nothing added
	}{
		{"each node holding half or more, weighted by its share, most first", sandboxPod(), 60,
			map[string]int64{"has-it": 0, "sibling": gib / 5, "base-only": 4 * gib, "empty": 10 * gib}, 10 * gib,
			terms("has-it", 60, "sibling", 59, "base-only", 36)},
		{"no node holds half: nothing", sandboxPod(), 60, map[string]int64{"a": 6 * gib, "b": 10 * gib}, 10 * gib, nil},
		{"no node has a cache: nothing", sandboxPod(), 60, nil, 10 * gib, nil},
		{"an image without layers: nothing", sandboxPod(), 60, map[string]int64{"a": 0}, 0, nil},
		{"a small weight still counts", sandboxPod(), 1, map[string]int64{"a": gib / 2}, gib, terms("a", 1)},
		{"at most 20 nodes, by name among equals", sandboxPod(), 40, many, gib, terms(first20...)},
		{"a Pod preferring nodes by name already keeps its own", sandboxPod(func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: terms("mine", 5)}}
		}), 60, map[string]int64{"a": 0}, gib, terms("mine", 5)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod.DeepCopy()
			added := AddNodeCacheAffinity(pod, tt.weight, tt.missing, tt.total)
			var got []corev1.PreferredSchedulingTerm
			if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
				got = a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
			}
			if !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("terms %+v, want %+v", got, tt.want)
			}
			if wantAdded := tt.want != nil && (tt.pod.Spec.Affinity == nil); added != wantAdded {
				t.Errorf("added %v, want %v", added, wantAdded)
			}
		})
	}
}

func TestMutateTemplate(t *testing.T) {
	colocate := Set{policy("colocate", 0, mirror, func(s *v1alpha1.SandboxPolicySpec) { s.Colocation = &v1alpha1.ColocationPolicy{} })}
	for _, tt := range []struct {
		name      string
		set       Set
		wantLabel string
	}{
		{"colocation labels the template's Pods and keys the term on it", colocate, "swe-django"},
		{"without colocation no label", Set{policy("mirror", 0, mirror)}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pt := &sandboxv1beta1.PodTemplate{Spec: sandboxPod().Spec}
			changes, err := MutateTemplate(pt, tt.set, "swe-django", "run-1")
			if err != nil || len(changes) == 0 {
				t.Fatalf("changes %v, %v", changes, err)
			}
			if got := pt.ObjectMeta.Labels[ColocateLabel]; got != tt.wantLabel {
				t.Errorf("%s = %q, want %q", ColocateLabel, got, tt.wantLabel)
			}
			if pt.ObjectMeta.Labels[fleetlabels.RunID] != "run-1" || !strings.HasPrefix(pt.Spec.Containers[0].Image, "mirror.example.com/") {
				t.Errorf("the policy is not applied: %+v", pt)
			}
			terms := 0
			if a := pt.Spec.Affinity; a != nil && a.PodAffinity != nil {
				for _, term := range a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
					if term.PodAffinityTerm.LabelSelector.MatchLabels[ColocateLabel] == tt.wantLabel {
						terms++
					}
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tt.wantLabel != ""]; terms != want {
				t.Errorf("%d colocation terms on the template's label, want %d", terms, want)
			}
			if more, err := MutateTemplate(pt, tt.set, "swe-django", "run-1"); err != nil || len(more) > 0 {
				t.Errorf("a second admission changed %v (%v)", more, err)
			}
		})
	}
}
