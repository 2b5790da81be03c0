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

	p := Patience{Grace: time.Hour}
	if giveUp, recheck := p.Judge(nil); giveUp || recheck != 0 {
		t.Errorf("no trouble: Judge = %v, %v; want to wait for a change", giveUp, recheck)
	}
	if giveUp, _ := p.Judge(terminal); !giveUp {
		t.Error("terminal trouble: Judge did not give up at once")
	}
	if giveUp, recheck := p.Judge(backoff); giveUp || recheck <= 0 || recheck > time.Hour {
		t.Errorf("new back-off: Judge = %v, %v; want to recheck within the grace", giveUp, recheck)
	}

	const grace = 300 * time.Millisecond
	short := Patience{Grace: grace}
	short.Judge(backoff)
	time.Sleep(grace + 50*time.Millisecond)
	short.Judge(nil) // the trouble cleared: the grace starts again
	if giveUp, _ := short.Judge(backoff); giveUp {
		t.Error("back-off after a break: Judge gave up before the grace began anew")
	}
	time.Sleep(grace + 50*time.Millisecond)
	if giveUp, _ := short.Judge(backoff); !giveUp {
		t.Error("back-off past the grace: Judge did not give up")
	}
}
