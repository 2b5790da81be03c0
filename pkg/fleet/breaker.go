package fleet

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// Expected is how many live sandboxes the run means to hold at its peak.
func (f *Fleet) Expected() int { return f.Plan.Peak.Pods }

// Ceiling is the live-sandbox count that trips the breaker, 0 when it is
// off.
func (f *Fleet) Ceiling() int {
	ceiling := 0
	if factor := *f.Config.OvercommitFactor; factor > 0 {
		ceiling = int(float64(f.Expected()) * factor)
	}
	if hard := f.Config.MaxLiveSandboxes; hard > 0 && (ceiling == 0 || hard < ceiling) {
		ceiling = hard
	}
	return ceiling
}

// startBreaker counts the run's live sandboxes on every cluster each
// BreakerInterval, from the trackers' caches (no API requests), and when
// BreakerPolls counts in a row exceed the ceiling cancels the run with an
// *OvercommitError. A single spike — a pool refilling while claims are
// released — never trips it. stop ends the breaker and returns its verdict.
func (f *Fleet) startBreaker(ctx context.Context, cancel context.CancelCauseFunc) (stop func() error) {
	ceiling := f.Ceiling()
	if ceiling == 0 {
		return func() error { return nil }
	}
	done := make(chan struct{})
	verdict := make(chan error, 1)
	go func() {
		ticker := time.NewTicker(f.Config.BreakerInterval.Duration)
		defer ticker.Stop()
		breaches := 0
		for {
			select {
			case <-done:
				verdict <- nil
				return
			case <-ctx.Done():
				verdict <- nil
				return
			case <-ticker.C:
			}
			live := 0
			for _, c := range f.Clusters {
				names, err := c.Tracker.LivePods(ctx)
				if err != nil {
					klog.Warningf("runaway breaker: counting sandboxes on %s: %v", c.Name, err)
				}
				f.mu.Lock()
				live += unreleased(names, c.released)
				f.mu.Unlock()
			}
			if live <= ceiling {
				breaches = 0
				continue
			}
			breaches++
			klog.Warningf("runaway breaker: %d live sandboxes over the ceiling of %d (%d/%d)", live, ceiling, breaches, f.Config.BreakerPolls)
			if breaches >= f.Config.BreakerPolls {
				err := &OvercommitError{Live: live, Ceiling: ceiling, Expected: f.Expected()}
				cancel(err)
				verdict <- err
				return
			}
		}
	}()
	return func() error {
		close(done)
		return <-verdict
	}
}

// unreleased counts the live Pods not among released, the Pods of the
// sandboxes the run gave back, and forgets those of released no longer
// live. A given-back sandbox is on its way out however long the garbage
// collector takes to delete its Pod — seconds in a burst of releases on a
// controller-manager held to its default 20 requests a second — and
// counting it would trip the breaker on a run doing just what it means to.
func unreleased(live []string, released map[string]bool) int {
	n := 0
	still := make(map[string]bool, len(live))
	for _, name := range live {
		if released[name] {
			still[name] = true
		} else {
			n++
		}
	}
	for name := range released {
		if !still[name] {
			delete(released, name)
		}
	}
	return n
}
