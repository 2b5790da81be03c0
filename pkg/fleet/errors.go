package fleet

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// The errors the engine returns about a task's sandbox, which a caller
// matches with errors.As. Package verdict defines them, so that the
// engine's parts return them too, and says whose fault each is.
type (
	// StartError is a task's claim given up because its sandbox's Pod
	// cannot become Ready (an image that cannot be pulled, no node with
	// room): an infrastructure failure of reason start.
	StartError = verdict.StartError
	// LostError says a task's sandbox went — its Pod deleted or evicted,
	// its node lost, a container restarted — under the task, which may be
	// retried on another: an infrastructure failure of reason lost.
	LostError = verdict.LostError
	// VanishedError says a task's claim was deleted by someone else while
	// the task waited for it: an infrastructure failure of reason lost.
	VanishedError = verdict.VanishedError
	// WarmError lists the warm pools that could not become Ready, by pool
	// name, with why: the tasks of their images cannot start, an
	// infrastructure failure of reason start.
	WarmError = verdict.WarmError
)

// TeardownError says what is left of a run could not be removed when it
// ended: its objects may still be on the cluster, which `reap --run-id`
// (or Teardown again) removes.
type TeardownError struct {
	RunID string
	Err   error
}

func (e *TeardownError) Error() string { return fmt.Sprintf("tearing down run %s: %v", e.RunID, e.Err) }
func (e *TeardownError) Unwrap() error { return e.Err }
