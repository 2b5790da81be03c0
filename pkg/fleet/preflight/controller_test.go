package preflight

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestJudgeController(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	lease := func(ago time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ctrl-1"),
			LeaseDurationSeconds: ptr.To[int32](15), RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-ago)))}}
	}
	deployment := func(ready int32) *appsv1.Deployment {
		return &appsv1.Deployment{Status: appsv1.DeploymentStatus{ReadyReplicas: ready}}
	}
	for _, tc := range []struct {
		name   string
		lease  *coordinationv1.Lease
		dep    *appsv1.Deployment
		status Status
		detail string
	}{
		{"a leader renews its Lease", lease(2 * time.Second), nil, Pass, "leader ctrl-1 renews"},
		{"a leader, whatever the Deployment says", lease(2 * time.Second), deployment(0), Pass, "renews"},
		{"no ready replica", nil, deployment(0), Fail, "has no ready replica"},
		{"ready replicas, none leading", lease(time.Minute), deployment(1), Warn, "no replica may be leading"},
		{"ready replicas without leader election", nil, deployment(2), Pass, "has 2 ready replicas"},
		{"a stale Lease and no Deployment in sight", lease(10 * time.Minute), nil, Fail, "last renewed 10m0s ago: the controller is not running"},
		{"nothing to read", nil, nil, Warn, "found neither"},
	} {
		got := judgeController(tc.lease, tc.dep, now)
		if got.Status != tc.status || !strings.Contains(got.Detail, tc.detail) || (got.Status != Pass && got.Fix == "") {
			t.Errorf("%s: %+v; want %s with %q and a fix", tc.name, got, tc.status, tc.detail)
		}
	}
}
