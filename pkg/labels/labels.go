// Package labels is the one label set every sandbox-fleet component puts on,
// and selects, the objects of a run. Cleanup, watches and reports are all
// scoped by RunID, so two runs in one namespace never touch each other.
package labels

import (
	"k8s.io/apimachinery/pkg/labels"
)

const (
	// RunID names the run that created an object; every object a run
	// creates carries it, Pods included (through the template's pod metadata).
	RunID = "sandbox-fleet.io/run-id"
	// ManagedBy is the standard label naming the managing tool.
	ManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedBy's value on everything sandbox-fleet creates.
	ManagedByValue = "sandbox-fleet"
	// OriginalImage is the annotation that records an image's reference
	// before a rewrite rule redirected it to a mirror.
	OriginalImage = "sandbox-fleet.io/original-image"
	// Pool names, on a sandbox Pod, the warm pool it belongs to; colocation
	// affinity selects a pool's replicas by it.
	Pool = "sandbox-fleet.io/pool"
	// TaskID is the annotation that records on a claim the task it serves.
	TaskID = "sandbox-fleet.io/task-id"
	// Client, RequestID and AcquiredImage are the annotations a session
	// (serve) records on a claim it holds: the client the sandbox is
	// leased to, the request id of the acquire that claimed it, and the
	// image asked for when the acquire named an image rather than a task.
	// A resumed session gives the sandbox back to that client by them.
	Client        = "sandbox-fleet.io/client"
	RequestID     = "sandbox-fleet.io/request-id"
	AcquiredImage = "sandbox-fleet.io/acquired-image"
)

// ForRun returns the labels of an object created by run runID.
func ForRun(runID string) map[string]string {
	return map[string]string{RunID: runID, ManagedBy: ManagedByValue}
}

// RunSelector selects the objects of run runID.
func RunSelector(runID string) labels.Selector {
	return labels.SelectorFromSet(ForRun(runID))
}
