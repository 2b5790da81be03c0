// Package sandbox describes a claimed sandbox: the task that holds it,
// the Agent Sandbox objects behind it (claim, Sandbox, Pod) and where it
// runs (node, Pod IP, in-cluster hostname). The engine returns a Handle
// for each sandbox it claims; fleet.Sandbox and the session's handles
// carry it.
package sandbox

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// Handle is a claimed sandbox, ready for work: what names it and where
// it runs, as it was when it was claimed.
type Handle struct {
	TaskID string `json:"taskId"`
	// Cluster names the fleet cluster the sandbox runs on.
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace"`
	Claim     string `json:"claim"`
	Sandbox   string `json:"sandbox"`
	// Hostname is the sandbox's stable in-cluster DNS name: Agent Sandbox
	// gives every Sandbox a headless Service of its own name.
	Hostname string `json:"hostname"`
	Pod      string `json:"pod"`
	// PodUID tells the claimed Pod from one the Sandbox controller made
	// again under the same name after it was lost.
	PodUID types.UID `json:"podUID,omitempty"`
	// Restarts counts the Pod's container restarts when it was claimed:
	// one more means a container was killed and started afresh, and
	// whatever a task had done in it is gone.
	Restarts int32  `json:"restarts,omitempty"`
	PodIP    string `json:"podIP"`
	Node     string `json:"node"`
	// Warm is true when the sandbox was Ready before it was claimed: the
	// task did not wait for it to start.
	Warm bool `json:"warm,omitempty"`
}

// Endpoint is the in-cluster address of port on the sandbox,
// <hostname>.<namespace>:<port>, for callers that reach it over the
// network rather than by exec.
func (h *Handle) Endpoint(port int) string {
	return fmt.Sprintf("%s.%s:%d", h.Hostname, h.Namespace, port)
}
