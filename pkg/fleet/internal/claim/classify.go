// Package claim claims a sandbox for a task from its image's warm pool and
// releases it. It fails fast: a claimed Pod that can never start (a bad image
// name, a missing image with pulls disabled, OOM, a finished Pod) ends the
// claim at once with a typed error instead of waiting out the ready timeout,
// and trouble that may clear up (pull back-off, crash loops, no room to
// schedule) ends it only after a grace period.
package claim

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Trouble is what is wrong with a claimed Pod.
type Trouble struct {
	Reason  string
	Message string
	// Terminal trouble cannot clear up; the rest may, given time.
	Terminal bool
}

var (
	terminalWaiting  = map[string]bool{"InvalidImageName": true, "ErrImageNeverPull": true}
	retryableWaiting = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true,
		"CreateContainerConfigError": true, "CrashLoopBackOff": true}
)

// Classify says what, if anything, keeps pod from becoming Ready. A nil
// Pod, or one still starting normally, has no trouble.
func Classify(pod *corev1.Pod) *Trouble {
	if pod == nil {
		return nil
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return &Trouble{Reason: "Pod" + string(pod.Status.Phase), Message: pod.Status.Message, Terminal: true}
	}
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	var retryable *Trouble
	for _, cs := range statuses {
		for _, term := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if term != nil && term.Reason == "OOMKilled" {
				return &Trouble{Reason: "OOMKilled", Message: "container " + cs.Name + " ran out of memory", Terminal: true}
			}
		}
		if w := cs.State.Waiting; w != nil {
			switch {
			case terminalWaiting[w.Reason]:
				return &Trouble{Reason: w.Reason, Message: w.Message, Terminal: true}
			case retryableWaiting[w.Reason] && retryable == nil:
				retryable = &Trouble{Reason: w.Reason, Message: w.Message}
			}
		}
	}
	if retryable != nil {
		return retryable
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &Trouble{Reason: c.Reason, Message: c.Message}
		}
	}
	return nil
}

// Grace is how long trouble that may clear up is borne before a wait gives
// up, by kind of trouble. Zero bears it for as long as the caller's context
// allows.
type Grace struct {
	// Backoff covers image pull back-offs, crash loops and container config
	// errors: a registry that throttles or a Secret created late clears up
	// within minutes, a wrong tag never does.
	Backoff time.Duration
	// Unschedulable covers a Pod no node has room for, which is normal for
	// as long as a cluster autoscaler takes to add a node.
	Unschedulable time.Duration
}

// For returns the grace for trouble t, which may clear up.
func (g Grace) For(t *Trouble) time.Duration {
	if t.Reason == corev1.PodReasonUnschedulable {
		return g.Unschedulable
	}
	return g.Backoff
}

// Patience gives a Pod's trouble its due: terminal trouble ends the wait at
// once, trouble that may clear up only once it has lasted its grace without
// a break. One Patience follows one Pod.
type Patience struct {
	Grace Grace
	since time.Time
}

// Judge takes the latest trouble, nil when there is none, and says whether
// to give up and, if not, how long to wait at most before judging again (0:
// until something changes).
func (p *Patience) Judge(t *Trouble, now time.Time) (giveUp bool, recheck time.Duration) {
	switch {
	case t == nil:
		p.since = time.Time{}
		return false, 0
	case t.Terminal:
		return true, 0
	}
	if p.since.IsZero() {
		p.since = now
	}
	grace := p.Grace.For(t)
	if grace == 0 {
		return false, 0
	}
	if left := grace - now.Sub(p.since); left > 0 {
		return false, left
	}
	return true, 0
}
