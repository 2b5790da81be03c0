package claim

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPoolPatience(t *testing.T) {
	ready := func() *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{
			Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	unschedulable := func() *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes"}}}}
	}
	gone := ready()
	gone.DeletionTimestamp = &metav1.Time{}
	grace := Grace{Backoff: time.Minute, Unschedulable: 10 * time.Minute}
	t0 := time.Unix(1000, 0)

	for _, tt := range []struct {
		name string
		pods []*corev1.Pod
		want int
		// after is how long after the first look the pool is judged.
		after          time.Duration
		giveUp, settle bool
		recheck        time.Duration
		lost           int
	}{
		{"all starting", []*corev1.Pod{waiting("ContainerCreating"), waiting("ContainerCreating")}, 2, 0, false, false, 0, 0},
		{"replicas not made yet", []*corev1.Pod{ready()}, 3, 0, false, false, 0, 0},
		{"one pending within its grace", []*corev1.Pod{ready(), unschedulable()}, 2, 5 * time.Minute, false, false, 5 * time.Minute, 0},
		{"one pending past its grace: the Ready one serves", []*corev1.Pod{ready(), ready(), unschedulable()}, 3, 10 * time.Minute, false, true, 0, 1},
		{"one bad image: the Ready ones serve", []*corev1.Pod{ready(), waiting("InvalidImageName")}, 2, 0, false, true, 0, 1},
		{"bad image while another still starts", []*corev1.Pod{waiting("ContainerCreating"), waiting("InvalidImageName")}, 2, 0, false, false, 0, 1},
		{"every replica bad", []*corev1.Pod{waiting("InvalidImageName"), waiting("ErrImageNeverPull")}, 2, 0, true, false, 0, 2},
		{"all pending past the grace", []*corev1.Pod{unschedulable(), unschedulable()}, 2, 10 * time.Minute, true, false, 0, 2},
		{"back-off past its grace, pending within", []*corev1.Pod{waiting("ImagePullBackOff"), unschedulable()}, 2, 2 * time.Minute, false, false, 8 * time.Minute, 1},
		{"a Pod being deleted counts for nothing", []*corev1.Pod{gone, waiting("InvalidImageName")}, 2, 0, false, false, 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pods := make([]corev1.Pod, len(tt.pods))
			for i, p := range tt.pods {
				pods[i] = *p
				pods[i].UID = types.UID(fmt.Sprint(i))
			}
			pp := PoolPatience{Grace: grace}
			pp.Judge(pods, tt.want, t0)
			j := pp.Judge(pods, tt.want, t0.Add(tt.after))
			if j.GiveUp != tt.giveUp || j.Settle != tt.settle || j.Recheck != tt.recheck || j.Lost != tt.lost {
				t.Errorf("Judge = %+v; want giveUp=%v settle=%v recheck=%s lost=%d", j, tt.giveUp, tt.settle, tt.recheck, tt.lost)
			}
		})
	}
}

func TestPoolPatienceForgetsReplacedPods(t *testing.T) {
	backoff := *waiting("ImagePullBackOff")
	backoff.UID = "old"
	pp := PoolPatience{Grace: Grace{Backoff: time.Minute}}
	t0 := time.Unix(1000, 0)
	pp.Judge([]corev1.Pod{backoff}, 1, t0)
	backoff.UID = "new"
	if j := pp.Judge([]corev1.Pod{backoff}, 1, t0.Add(2*time.Minute)); j.GiveUp {
		t.Errorf("a new Pod in place of one that backed off was given up at once: %+v", j)
	}
	if len(pp.pods) != 1 {
		t.Errorf("PoolPatience follows %d Pods, want only the one that is there", len(pp.pods))
	}
}
