package controllerwatch

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

func TestJudge(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	lease := func(renewed time.Duration, holder *string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		l.Spec.LeaseDurationSeconds = new(int32(15))
		if *holder == "" {
			// As leader election releases it.
			l.Spec.LeaseDurationSeconds = new(int32(1))
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-renewed)}
		l.Spec.HolderIdentity = holder
		return l
	}
	leader := new("agent-sandbox-controller-7d9_1234")
	for _, tt := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  State
	}{
		{"no Lease, or not readable: nothing known", nil, State{}},
		{"renewed 2s ago", lease(2*time.Second, leader), State{}},
		{"renewed exactly its duration ago", lease(15*time.Second, leader), State{}},
		{"unrenewed past its duration", lease(40*time.Second, leader), State{Down: true, Since: now.Add(-25 * time.Second)}},
		{"released by a replica that stopped", lease(5*time.Second, new("")), State{Down: true, Since: now.Add(-4 * time.Second)}},
		{"never renewed nor acquired", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: new(int32(15))}}, State{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Judge(tt.lease, now); got != tt.want {
				t.Errorf("Judge = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A guard ends its context, with the controller verdict as its cause, once
// the controller has been down for the grace, and not while it leads.
func TestGuard(t *testing.T) {
	w := &Watch{changed: make(chan struct{})}
	ctx, stop := w.Guard(t.Context(), 200*time.Millisecond)
	defer stop()
	select {
	case <-ctx.Done():
		t.Fatal("guard ended while the controller leads")
	case <-time.After(300 * time.Millisecond):
	}
	w.set(State{Down: true, Since: time.Now()})
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("guard did not end 5s after the controller went down, with a grace of 200ms")
	}
	var e *verdict.Error
	if cause := context.Cause(ctx); !errors.As(cause, &e) || verdict.Reason(cause) != verdict.Controller {
		t.Errorf("cause %v, want a %s failure", cause, verdict.Controller)
	}

	// Back within the grace: the wait goes on.
	w.set(State{})
	ctx, stop = w.Guard(t.Context(), time.Second)
	defer stop()
	w.set(State{Down: true, Since: time.Now()})
	time.Sleep(100 * time.Millisecond)
	w.set(State{})
	select {
	case <-ctx.Done():
		t.Fatalf("guard ended though the controller came back within the grace: %v", context.Cause(ctx))
	case <-time.After(1500 * time.Millisecond):
	}
}
