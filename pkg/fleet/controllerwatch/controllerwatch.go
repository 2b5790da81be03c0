// Package controllerwatch follows the Agent Sandbox controller while a run
// or a session waits on it: without it no claim becomes Ready, and nothing
// else says so — a claim just waits. The controller's replicas renew a
// leader Lease (preflight.ControllerLease) every few seconds; a Lease left
// unrenewed past its duration means no replica leads.
package controllerwatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/heartbeat"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// Interval is how often the Lease is read: with the Lease's 15 s a
// controller that stops is seen down within about 20 s.
const Interval = 3 * time.Second

// State is what the last read of the Lease told.
type State struct {
	// Down is true while no replica has renewed the Lease within its
	// duration; Since is when it ran out.
	Down  bool
	Since time.Time
}

// Judge reads the controller's state from its Lease, nil when it could not
// be read (absent, or not allowed): then nothing is known, and nothing is
// judged down — a run without the right to read it waits as before. A
// replica that stops on purpose releases the Lease with a duration of a
// second, so it is down a second later.
func Judge(lease *coordinationv1.Lease, now time.Time) State {
	if lease == nil {
		return State{}
	}
	expires, ok := heartbeat.ExpiresAt(lease)
	if !ok || !now.After(expires) {
		return State{}
	}
	return State{Down: true, Since: expires}
}

// Read reads the controller's Lease through kc and judges it as of now.
func Read(ctx context.Context, kc kubernetes.Interface) State {
	lease, err := kc.CoordinationV1().Leases(preflight.ControllerNamespace).Get(ctx, preflight.ControllerLease, metav1.GetOptions{})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("reading the Agent Sandbox controller's Lease", "err", err)
		lease = nil
	}
	return Judge(lease, time.Now())
}

// Watch is the controller's state as last read, kept up to date until its
// context ends.
type Watch struct {
	mu      sync.Mutex
	state   State
	changed chan struct{} // closed and replaced when the state changes
}

// Start reads the Lease through kc every Interval until ctx ends, and
// calls changed with each new state.
func Start(ctx context.Context, kc kubernetes.Interface, changed func(State)) *Watch {
	w := &Watch{changed: make(chan struct{})}
	go func() {
		tick := time.NewTicker(Interval)
		defer tick.Stop()
		for {
			if s := Read(ctx, kc); w.set(s) {
				changed(s)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// set records s and reports whether it changed.
func (w *Watch) set(s State) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s == w.state {
		return false
	}
	w.state = s
	close(w.changed)
	w.changed = make(chan struct{})
	return true
}

// State is the controller's state as last read.
func (w *Watch) State() State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Changed returns a channel closed when the state next changes.
func (w *Watch) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Guard returns a context that ends, with an infrastructure failure
// (verdict.Controller) as its cause, once the controller has been down
// for grace: a wait for a sandbox that no controller will make Ready ends
// then rather than at its own deadline. A controller back in time lets the
// wait go on. stop releases the guard.
func (w *Watch) Guard(ctx context.Context, grace time.Duration) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			changed := w.Changed()
			s := w.State()
			var timer <-chan time.Time
			if s.Down {
				left := time.Until(s.Since.Add(grace))
				if left <= 0 {
					cancel(verdict.Infrastructure(verdict.Controller, fmt.Errorf(
						"the Agent Sandbox controller has been down for %s (no replica renews its leader Lease %s/%s), longer than the controller grace %s",
						time.Since(s.Since).Round(time.Second), preflight.ControllerNamespace, preflight.ControllerLease, grace)))
					return
				}
				timer = time.After(left)
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-timer:
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}
