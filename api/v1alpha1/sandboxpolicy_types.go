package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxPolicy is what a cluster admin requires of sandbox Pods — the Pods
// of Agent Sandboxes, whoever created them — in the namespaces it selects:
// images from mirrors and allowed registries, security defaults and
// denials, a runtime class, limit caps, colocation of a pool's replicas and
// run labels. asrl-webhook applies it when the Pods are created and checks
// SandboxTemplates against it when they are applied.
//
// Several policies may select a namespace. They merge in order of
// spec.priority, then name: denials and caps take the strictest of them,
// rewrite rules are tried highest priority first, and a single-valued field
// (runtime class, scheduler) comes from the highest priority that sets it;
// two policies of the same priority setting it differently are a conflict,
// and the Pod is denied naming both.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=sbpol;sbpols,categories=sandbox-fleet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Runtime Class",type=string,JSONPath=`.spec.runtimeClassName`
// +kubebuilder:printcolumn:name="In Force",type=string,JSONPath=`.status.conditions[?(@.type=="InForce")].status`
// +kubebuilder:printcolumn:name="Mutated",type=integer,JSONPath=`.status.mutatedPods`
// +kubebuilder:printcolumn:name="Denied",type=integer,JSONPath=`.status.deniedPods`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxPolicySpec   `json:"spec,omitempty"`
	Status SandboxPolicyStatus `json:"status,omitempty"`
}

// SandboxPolicySpec says which namespaces a policy governs and what it
// requires there.
type SandboxPolicySpec struct {
	// NamespaceSelector selects the namespaces whose sandbox Pods the policy
	// governs. Empty selects every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// OtherPodSelector selects the Pods that may run in the governed
	// namespaces without being sandboxes — a trainer, serve, a Job. Every
	// other Pod there must be a sandbox Pod: one the Agent Sandbox
	// controller made, labelled agents.x-k8s.io/sandbox-name-hash, which
	// the policy judges. Unset, no other Pod is admitted; {} selects every
	// Pod (such Pods are then bounded only by Pod Security admission). A
	// Pod carrying agents.x-k8s.io/adoptable, which the controller would
	// adopt into a Sandbox, is refused whatever this selects.
	// +optional
	OtherPodSelector *metav1.LabelSelector `json:"otherPodSelector,omitempty"`

	// Priority orders overlapping policies: a higher priority is tried
	// first for rewrites and wins single-valued fields.
	// +kubebuilder:default=0
	// +optional
	Priority int32 `json:"priority,omitempty"`

	// Images redirects and restricts the images sandboxes run.
	// +optional
	Images *ImagePolicy `json:"images,omitempty"`

	// Security sets safe defaults and denies what sandboxes must not do.
	// Omitted, every default applies and nothing privileged is allowed.
	// +optional
	Security *SecurityPolicy `json:"security,omitempty"`

	// RuntimeClassName is the runtime class every sandbox Pod must use,
	// e.g. gvisor or kata. It is set on Pods that name none; a Pod naming
	// another is denied.
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`

	// MaxLimits caps a sandbox's resource limits: each container's, and
	// the Pod's as a whole — its pod-level limit (spec.resources) where it
	// sets one, else its containers together as the kubelet sizes a Pod.
	// A container without a limit gets the cap, so a Pod of several
	// containers names theirs; a container or Pod above the cap is denied.
	// +optional
	MaxLimits corev1.ResourceList `json:"maxLimits,omitempty"`

	// Colocation keeps the replicas of a warm pool on as few nodes as
	// possible, so one node pulls each image.
	// +optional
	Colocation *ColocationPolicy `json:"colocation,omitempty"`

	// NodeCache prefers, for each sandbox Pod, the nodes that already hold
	// most of its images' bytes, as the nodes' asrl-prepull-agents report
	// them: preferred node affinity, for clusters that run no
	// asrl-scheduler (which does this better, in its NodeCacheLocality
	// plugin).
	// +optional
	NodeCache *NodeCachePolicy `json:"nodeCache,omitempty"`

	// SchedulerName is the scheduler sandbox Pods are handed to, e.g.
	// sandbox-fleet-scheduler (asrl-scheduler, manifests/scheduler): set on
	// Pods naming none or the cluster's default. A Pod naming another is
	// denied unless spec.security.allowedSchedulerNames lists it.
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`

	// Network fences the sandbox Pods of the governed namespaces off the
	// network: asrl-webhook writes a NetworkPolicy into each of them
	// (NetworkPolicyName) that selects their sandbox Pods and allows no
	// connection in or out but those listed here, denies sandbox Pods
	// there until it is written, and has their SandboxTemplates leave
	// networking to it (networkPolicyManagement Unmanaged), since the
	// NetworkPolicies selecting a Pod add up. Unset, the policy does not
	// govern sandboxes' network. The cluster's network plugin must
	// enforce NetworkPolicies.
	// +optional
	Network *NetworkIsolation `json:"network,omitempty"`
}

// NetworkIsolation is what sandboxes may reach, and what may reach them,
// beyond nothing. Whatever it allows, the cloud metadata endpoints
// (MetadataEndpoints) are excepted from every ipBlock: a sandbox reading
// the node's cloud credentials is never allowed.
type NetworkIsolation struct {
	// DNS lets sandboxes resolve names with the cluster's DNS: the Pods
	// labelled k8s-app=kube-dns in kube-system, on port 53.
	// +kubebuilder:default=true
	// +optional
	DNS *bool `json:"dns,omitempty"`
	// Egress are the destinations sandboxes may connect to: a package
	// mirror or registry by its Pods or its CIDR, the internet as
	// 0.0.0.0/0 (with the cluster's own ranges in except). As in a
	// NetworkPolicy; none, sandboxes connect nowhere but DNS.
	// +listType=atomic
	// +optional
	Egress []networkingv1.NetworkPolicyEgressRule `json:"egress,omitempty"`
	// Ingress are who may connect to sandboxes: serve, or a trainer that
	// talks to a server in the sandbox (SWE-ReX). As in a NetworkPolicy;
	// none, nothing connects to them (exec and port-forward go through
	// the kubelet, not the Pod network).
	// +listType=atomic
	// +optional
	Ingress []networkingv1.NetworkPolicyIngressRule `json:"ingress,omitempty"`
}

// ImagePolicy redirects images to mirrors and restricts registries.
type ImagePolicy struct {
	// Rewrite rules redirect image references — of containers and of image
	// volumes: the first rule whose From is a prefix of the normalized
	// reference (docker.io/library/busybox:1.36 for busybox:1.36) at a
	// path boundary replaces it with To. A registry host as From holds
	// only its paths (docker.io, not docker.io:443), and hosts compare
	// whatever their case. The original is recorded in the
	// sandbox-fleet.io/original-image annotation.
	// +listType=atomic
	// +optional
	Rewrite []ImageRewrite `json:"rewrite,omitempty"`

	// AllowedRegistries, when set, are the only registries (or registry
	// path prefixes) sandbox images and image volumes may come from,
	// checked after rewrites. A registry host allows that host alone, on
	// its default port: mirror.example.com does not allow
	// mirror.example.com:5000.
	// +listType=set
	// +optional
	AllowedRegistries []string `json:"allowedRegistries,omitempty"`
}

// ImageRewrite redirects images under From to To.
type ImageRewrite struct {
	// +kubebuilder:validation:MinLength=1
	From string `json:"from"`
	// +kubebuilder:validation:MinLength=1
	To string `json:"to"`
}

// SecurityPolicy is what sandboxes are allowed beyond the safe defaults:
// no service account token (nor a projected one, nor a service account
// other than the namespace's default), no privilege escalation, every
// capability dropped, the runtime's default seccomp profile, no shared
// process namespace, nothing privileged (nor a Windows host process), no
// host namespaces or paths, no SELinux type outside the container types,
// and only the safe sysctls.
type SecurityPolicy struct {
	// AllowPrivileged lets containers run privileged, or as Windows host
	// processes.
	// +optional
	AllowPrivileged bool `json:"allowPrivileged,omitempty"`
	// AllowHostNamespaces lets Pods use the host's network, PID or IPC
	// namespace.
	// +optional
	AllowHostNamespaces bool `json:"allowHostNamespaces,omitempty"`
	// AllowHostPath lets Pods mount hostPath volumes.
	// +optional
	AllowHostPath bool `json:"allowHostPath,omitempty"`
	// AllowServiceAccountToken keeps the Pod's choice of mounting its
	// service account token instead of turning it off, and lets it
	// project tokens and run as any service account.
	// +optional
	AllowServiceAccountToken bool `json:"allowServiceAccountToken,omitempty"`
	// AllowUnconfined lets Pods and containers run with the seccomp or
	// AppArmor profile Unconfined, an unmasked /proc (procMount
	// Unmasked), an SELinux type other than container_t,
	// container_init_t, container_kvm_t and container_engine_t (spc_t is
	// unconfined), or an SELinux user or role of their own.
	// +optional
	AllowUnconfined bool `json:"allowUnconfined,omitempty"`
	// AllowHostPorts lets containers bind ports of their node (hostPort).
	// +optional
	AllowHostPorts bool `json:"allowHostPorts,omitempty"`
	// AllowedCapabilities may be added by containers; every other
	// capability is dropped, and adding one is denied.
	// +listType=set
	// +optional
	AllowedCapabilities []corev1.Capability `json:"allowedCapabilities,omitempty"`
	// AllowedSysctls are the sysctls Pods may set beyond the safe ones
	// every kubelet allows (Pod Security's baseline list); one ending in
	// * allows every name it prefixes. A node's kubelet must allow them
	// too (--allowed-unsafe-sysctls).
	// +listType=set
	// +optional
	AllowedSysctls []string `json:"allowedSysctls,omitempty"`
	// AllowedVolumeTypes are the volume sources Pods may use beyond those
	// that reach nothing of the node's own — emptyDir, configMap, secret,
	// downwardAPI, projected, persistentVolumeClaim, ephemeral and image
	// (hostPath is allowHostPath's) —, named as the Pod spec names them:
	// nfs, csi (inline), gitRepo, iscsi, rbd, cephfs, flexVolume, ...
	// Every other one is denied: their drivers run as root on the node.
	// +listType=set
	// +optional
	AllowedVolumeTypes []string `json:"allowedVolumeTypes,omitempty"`
	// AllowedTolerationKeys are the taint keys sandbox Pods may tolerate,
	// e.g. that of a node pool kept for sandboxes. A taint keeps Pods off
	// nodes an admin reserved (control plane, system or GPU nodes), so
	// every other toleration is denied, as is one of every taint (no
	// key) — but for the NoExecute tolerations of
	// node.kubernetes.io/not-ready and unreachable the API server adds.
	// +listType=set
	// +optional
	AllowedTolerationKeys []string `json:"allowedTolerationKeys,omitempty"`
	// AllowedSchedulerNames are schedulers sandbox Pods may name besides
	// the cluster's default and spec.schedulerName; a Pod naming another
	// is denied, since a scheduler places Pods by rules of its own.
	// +listType=set
	// +optional
	AllowedSchedulerNames []string `json:"allowedSchedulerNames,omitempty"`
	// RequireNonRoot makes containers run as a user other than root: the
	// Pod's runAsNonRoot is set where it is unset — the kubelet then
	// refuses to start an image whose user is root — and runAsNonRoot
	// false or runAsUser 0 is denied.
	// +optional
	RequireNonRoot bool `json:"requireNonRoot,omitempty"`
}

// ColocationPolicy prefers one node for a warm pool's replicas.
type ColocationPolicy struct {
	// Weight of the preferred pod affinity, 1 to 100.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=100
	// +optional
	Weight int32 `json:"weight,omitempty"`
}

// NodeCachePolicy prefers nodes holding a Pod's image.
type NodeCachePolicy struct {
	// Weight of the preference, 1 to 100: each node holding at least half
	// of the Pod's image bytes (the 20 holding most) is preferred with
	// this weight times the share it holds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=50
	// +optional
	Weight int32 `json:"weight,omitempty"`
}

// SandboxPolicyStatus says whether the policy is in force and counts what
// it did.
type SandboxPolicyStatus struct {
	// Conditions: InForce is True once the webhook's configurations have
	// the API server call it for the sandbox Pods and SandboxTemplates of
	// the namespaces this generation of the policy selects.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// MutatedPods counts sandbox Pods the policy changed.
	// +optional
	MutatedPods int64 `json:"mutatedPods,omitempty"`
	// DeniedPods counts sandbox Pods and templates the policy refused.
	// +optional
	DeniedPods int64 `json:"deniedPods,omitempty"`
}

// SandboxPolicyList is a list of SandboxPolicy.
//
// +kubebuilder:object:root=true
type SandboxPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SandboxPolicy{}, &SandboxPolicyList{})
}

// PolicyInForce is the SandboxPolicy condition saying the webhook's
// configurations serve the policy's generation.
const PolicyInForce = "InForce"
