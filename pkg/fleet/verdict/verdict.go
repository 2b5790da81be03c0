// Package verdict says whose fault a failure is — one word shared by the
// session API, the Python client's exceptions, the results JSONL and the
// metrics. Trainers mask infrastructure failures out of the loss instead of
// scoring them as a zero reward.
package verdict

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	// Controller: the Agent Sandbox controller was down longer than the
	// run's grace while the task waited for its sandbox.
	Controller = "controller"
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
	var start *StartError
	var lost *LostError
	var vanished *VanishedError
	var warm WarmError
	switch {
	case errors.As(err, &e):
		return e.Reason
	case errors.As(err, &lost), errors.As(err, &vanished):
		return Lost
	case errors.As(err, &start), errors.As(err, &warm):
		return Start
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	default:
		return API
	}
}

// StartError is a task's claim given up because its sandbox's Pod cannot
// become Ready: at once for trouble that cannot clear up (Terminal: an
// invalid image name, a finished Pod), after the run's grace for the rest
// (image pull back-offs, Unschedulable). Reason and Message are the Pod's.
type StartError struct {
	TaskID, Claim, Pod string
	Reason, Message    string
	Terminal           bool
}

func (e *StartError) Error() string {
	kind := "after the grace period"
	if e.Terminal {
		kind = "at once"
	}
	return fmt.Sprintf("task %s: claim %s failed %s: pod %s: %s: %s", e.TaskID, e.Claim, kind, e.Pod, e.Reason, e.Message)
}

// LostError says a claimed sandbox's Pod is gone or going — deleted,
// evicted, its node lost, a container restarted — so what the task did in
// it is lost with it. Why says which.
type LostError struct {
	TaskID, Pod, Why string
}

func (e *LostError) Error() string {
	return fmt.Sprintf("task %s: sandbox pod %s was lost: %s", e.TaskID, e.Pod, e.Why)
}

// VanishedError says a task's claim was deleted — by another client, or
// with its namespace — while the task waited for it.
type VanishedError struct {
	TaskID, Claim string
}

func (e *VanishedError) Error() string {
	return fmt.Sprintf("task %s: claim %s was deleted while the task waited for it (by another client or with its namespace)", e.TaskID, e.Claim)
}

// WarmError lists the warm pools that could not become Ready, by pool
// name, with why: an image that cannot be pulled, no node with room. The
// tasks of their images cannot start, an infrastructure failure of reason
// start.
type WarmError map[string]error

func (e WarmError) Error() string {
	msgs := make([]string, 0, len(e))
	for _, name := range slices.Sorted(maps.Keys(e)) {
		msgs = append(msgs, e[name].Error())
	}
	return strings.Join(msgs, "; ")
}
