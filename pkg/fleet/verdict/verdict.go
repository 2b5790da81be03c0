// Package verdict says whose fault a failure is — one word shared by the
// session API, the Python client's exceptions, the results JSONL and the
// metrics. Trainers mask infrastructure failures out of the loss instead of
// scoring them as a zero reward.
package verdict

import (
	"context"
	"errors"

	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/claim"
)

const (
	// Infra: the sandbox could not start, was lost, timed out, or the
	// cluster failed; the task says nothing about the policy.
	Infra = "infra"
	// Task: the work ran and failed.
	Task = "task"
)

// Reasons an infrastructure failure has.
const (
	Start   = "start"   // the sandbox could not start
	Lost    = "lost"    // its Pod went away
	Timeout = "timeout" // a wait or the work ran out of time
	API     = "api"     // the API server or the connection to it
	Exec    = "exec"    // the command could not be run in the sandbox
)

// Error is an infrastructure failure with its reason.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Infrastructure wraps err as an infrastructure failure for reason; nil
// stays nil.
func Infrastructure(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Reason: reason, Err: err}
}

// Reason says why err, an infrastructure failure, happened: the reason it
// was given, else what its type tells (a claim's Pod that could not start,
// a lost sandbox, a deadline), else an API failure.
func Reason(err error) string {
	var e *Error
	var start *claim.Error
	var lost *claim.LostError
	var vanished *claim.VanishedError
	switch {
	case errors.As(err, &e):
		return e.Reason
	case errors.As(err, &lost), errors.As(err, &vanished):
		return Lost
	case errors.As(err, &start):
		return Start
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	default:
		return API
	}
}
