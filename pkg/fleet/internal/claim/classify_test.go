package claim

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func waiting(reason string) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "sandbox", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}}
}

func TestClassify(t *testing.T) {
	oom := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "sandbox", LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled"}},
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	initBad := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{
		Name: "init", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "InvalidImageName"}}}}}}
	unschedulable := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes"}}}}
	mixed := waiting("ImagePullBackOff")
	mixed.Status.ContainerStatuses = append(mixed.Status.ContainerStatuses, corev1.ContainerStatus{Name: "side",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}})

	for _, tt := range []struct {
		name     string
		pod      *corev1.Pod
		reason   string
		terminal bool
	}{
		{"no pod yet", nil, "", false},
		{"starting", waiting("ContainerCreating"), "", false},
		{"running", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, "", false},
		{"bad image name", waiting("InvalidImageName"), "InvalidImageName", true},
		{"image never pulled", waiting("ErrImageNeverPull"), "ErrImageNeverPull", true},
		{"pull error", waiting("ErrImagePull"), "ErrImagePull", false},
		{"pull back-off", waiting("ImagePullBackOff"), "ImagePullBackOff", false},
		{"config error", waiting("CreateContainerConfigError"), "CreateContainerConfigError", false},
		{"crash loop", waiting("CrashLoopBackOff"), "CrashLoopBackOff", false},
		{"OOM killed before", oom, "OOMKilled", true},
		{"failed", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Message: "evicted"}}, "PodFailed", true},
		{"succeeded", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, "PodSucceeded", true},
		{"init container", initBad, "InvalidImageName", true},
		{"unschedulable", unschedulable, "Unschedulable", false},
		{"terminal beats retryable", mixed, "ErrImageNeverPull", true},
	} {
		got := Classify(tt.pod)
		switch {
		case tt.reason == "" && got != nil:
			t.Errorf("%s: trouble %+v, want none", tt.name, got)
		case tt.reason != "" && (got == nil || got.Reason != tt.reason || got.Terminal != tt.terminal):
			t.Errorf("%s: trouble %+v, want %s terminal=%v", tt.name, got, tt.reason, tt.terminal)
		}
	}
}

func TestPatience(t *testing.T) {
	terminal := &Trouble{Reason: "InvalidImageName", Terminal: true}
	backoff := &Trouble{Reason: "ImagePullBackOff"}
	unschedulable := &Trouble{Reason: corev1.PodReasonUnschedulable}
	t0 := time.Unix(1000, 0)

	p := Patience{Grace: Grace{Backoff: time.Hour, Unschedulable: time.Hour}}
	if giveUp, recheck := p.Judge(nil, t0); giveUp || recheck != 0 {
		t.Errorf("no trouble: Judge = %v, %v; want to wait for a change", giveUp, recheck)
	}
	if giveUp, _ := p.Judge(terminal, t0); !giveUp {
		t.Error("terminal trouble: Judge did not give up at once")
	}
	if giveUp, recheck := p.Judge(backoff, t0); giveUp || recheck != time.Hour {
		t.Errorf("new back-off: Judge = %v, %v; want to recheck when the grace ends", giveUp, recheck)
	}

	short := Patience{Grace: Grace{Backoff: time.Minute, Unschedulable: 10 * time.Minute}}
	short.Judge(backoff, t0)
	short.Judge(nil, t0.Add(2*time.Minute)) // the trouble cleared: the grace starts again
	if giveUp, _ := short.Judge(backoff, t0.Add(2*time.Minute)); giveUp {
		t.Error("back-off after a break: Judge gave up before the grace began anew")
	}
	if giveUp, _ := short.Judge(backoff, t0.Add(3*time.Minute)); !giveUp {
		t.Error("back-off past its grace: Judge did not give up")
	}

	pending := Patience{Grace: Grace{Backoff: time.Minute, Unschedulable: 10 * time.Minute}}
	pending.Judge(unschedulable, t0)
	if giveUp, recheck := pending.Judge(unschedulable, t0.Add(2*time.Minute)); giveUp || recheck != 8*time.Minute {
		t.Errorf("unschedulable past the back-off grace: Judge = %v, %v; want to wait out its own grace", giveUp, recheck)
	}
	if giveUp, _ := pending.Judge(unschedulable, t0.Add(10*time.Minute)); !giveUp {
		t.Error("unschedulable past its grace: Judge did not give up")
	}

	off := Patience{}
	off.Judge(backoff, t0)
	if giveUp, recheck := off.Judge(backoff, t0.Add(24*time.Hour)); giveUp || recheck != 0 {
		t.Errorf("fail-fast off: Judge = %v, %v; want to wait for as long as the caller allows", giveUp, recheck)
	}
	if giveUp, _ := off.Judge(terminal, t0); !giveUp {
		t.Error("fail-fast off, terminal trouble: Judge did not give up at once")
	}
}
