package heartbeat

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestExpired(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(now.Add(-ago))) }
	for _, tc := range []struct {
		name            string
		renewed, aquire *metav1.MicroTime
		duration        *int32
		want            bool
	}{
		{"renewed within its duration", at(10 * time.Second), nil, ptr.To[int32](30), false},
		{"renewed too long ago", at(31 * time.Second), nil, ptr.To[int32](30), true},
		{"never renewed, acquired just now", nil, at(time.Second), ptr.To[int32](30), false},
		{"no times at all", nil, nil, ptr.To[int32](30), true},
		{"no duration", at(0), nil, nil, true},
	} {
		lease := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: tc.renewed, AcquireTime: tc.aquire, LeaseDurationSeconds: tc.duration}}
		if got := Expired(lease, now); got != tc.want {
			t.Errorf("%s: Expired = %v, want %v", tc.name, got, tc.want)
		}
	}
}
