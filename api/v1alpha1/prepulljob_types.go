package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PrepullHeartbeat is the longest an agent leaves its node's entry of a
// PrepullJob unwritten while the node is Pulling it.
const PrepullHeartbeat = 20 * time.Second

// PrepullJob pulls images onto the nodes it selects before sandboxes need
// them. Each selected node's asrl-prepull-agent pulls them through the
// node's runtime — with the runtime's own registry credentials and
// mirrors, as the kubelet would — a few at a time, and stops before the
// node's image filesystem passes the job's high-water mark. Each agent
// reports its node's progress in status.nodes.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=ppj;ppjs,categories=sandbox-fleet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="High-Water",type=integer,JSONPath=`.spec.diskHighWaterPercent`,priority=1
// +kubebuilder:printcolumn:name="Delete When Done",type=boolean,JSONPath=`.spec.deleteWhenDone`,priority=1
// +kubebuilder:printcolumn:name="TTL",type=integer,JSONPath=`.spec.ttlSecondsAfterFinished`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PrepullJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a PrepullJob's spec cannot change: delete it and create another"
	Spec   PrepullJobSpec   `json:"spec"`
	Status PrepullJobStatus `json:"status,omitempty"`
}

// PrepullJobSpec is what to pull, where, and how hard.
type PrepullJobSpec struct {
	// Images are the images to pull, as Pods name them.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2000
	// +kubebuilder:validation:items:MinLength=1
	// +listType=atomic
	Images []string `json:"images"`

	// NodeSelector selects the nodes by their labels; empty selects every
	// node that runs an agent.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// PerNodeParallelism is how many images a node pulls at once.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	PerNodeParallelism int32 `json:"perNodeParallelism,omitempty"`

	// DiskHighWaterPercent is the disk budget: a node starts no pull while
	// its image filesystem is this full or fuller, and says so in its
	// status instead. The kubelet's image garbage collection starts at
	// 85% by default; pulling past it would have it remove images again.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	DiskHighWaterPercent int32 `json:"diskHighWaterPercent,omitempty"`

	// DeleteWhenDone has each node remove, when the job is deleted, the
	// images it pulled for the job (not those it already had, nor those
	// a container uses). A run that pre-pulls deletes its job when it
	// ends, which then frees the disk.
	// +optional
	DeleteWhenDone bool `json:"deleteWhenDone,omitempty"`

	// TTLSecondsAfterFinished has the job deleted this long after every
	// node that took part finished (its last entry's updateTime), as a
	// Job's field of the same name; with DeleteWhenDone the nodes then
	// remove the images. Unset keeps the job until someone deletes it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// PrepullJobStatus is each selected node's progress.
type PrepullJobStatus struct {
	// Nodes are the selected nodes, each written by the node's agent.
	// +optional
	// +listType=map
	// +listMapKey=node
	Nodes []NodePrepullStatus `json:"nodes,omitempty"`
}

// NodePrepullStatus is one node's progress on a PrepullJob.
type NodePrepullStatus struct {
	// Node is the node's name.
	Node string `json:"node"`
	// Phase is Pulling until every image is on the node (Succeeded), some
	// failed to pull (Failed), or the disk budget stopped the pulls
	// (Stopped).
	Phase PrepullPhase `json:"phase"`
	// Message says why a node Failed or Stopped.
	// +optional
	Message string `json:"message,omitempty"`
	// Pulled, Present, Failed and Pending count the job's images: pulled
	// for the job, on the node already, failed, not pulled yet.
	Pulled  int32 `json:"pulled"`
	Present int32 `json:"present"`
	Failed  int32 `json:"failed"`
	Pending int32 `json:"pending"`
	// Failures are the first images that failed to pull, with why.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Failures []ImagePullFailure `json:"failures,omitempty"`
	// UpdateTime is when the agent last wrote this. While the node is
	// Pulling its agent writes at least every 20 seconds
	// (PrepullHeartbeat), changed or not, so that an entry Pulling that
	// stands still much longer tells its agent stopped, not a long pull.
	UpdateTime metav1.Time `json:"updateTime"`
}

// ImagePullFailure is an image a node could not pull.
type ImagePullFailure struct {
	Image string `json:"image"`
	// Message is the runtime's error.
	Message string `json:"message"`
}

// PrepullPhase is where a node is on a PrepullJob.
// +kubebuilder:validation:Enum=Pulling;Succeeded;Failed;Stopped
type PrepullPhase string

// The phases of a node on a PrepullJob.
const (
	PrepullPulling   PrepullPhase = "Pulling"
	PrepullSucceeded PrepullPhase = "Succeeded"
	PrepullFailed    PrepullPhase = "Failed"
	PrepullStopped   PrepullPhase = "Stopped"
)

// +kubebuilder:object:root=true

// PrepullJobList is a list of PrepullJobs.
type PrepullJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PrepullJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PrepullJob{}, &PrepullJobList{})
}
