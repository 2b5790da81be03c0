package fleet

import (
	"context"
	"time"
)

// expected is how many live sandboxes the run means to hold at its peak.
func (f *Fleet) expected() int { return f.plan.Peak.Pods }

// ceiling is the live-sandbox count that trips the breaker, 0 when it is
// off.
func (f *Fleet) ceiling() int {
	ceiling := 0
	if factor := *f.cfg.OvercommitFactor; factor > 0 {
		ceiling = int(float64(f.expected()) * factor)
	}
	if hard := f.cfg.MaxLiveSandboxes; hard > 0 && (ceiling == 0 || hard < ceiling) {
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
	ceiling := f.ceiling()
	if ceiling == 0 {
		return func() error { return nil }
	}
	done := make(chan struct{})
	verdict := make(chan error, 1)
	go func() {
		ticker := time.NewTicker(f.cfg.BreakerInterval.Duration)
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
			entries := make([]liveEntry, len(f.clusters))
			for i, c := range f.clusters {
				entries[i] = liveEntry{where: c.Clients.Config.Host + "/" + c.Namespace(), live: c.tracker.LivePods()}
			}
			f.mu.Lock()
			// Release writes released under the lock; read it under it too.
			for i, c := range f.clusters {
				entries[i].released = c.released
			}
			live := countLive(entries)
			f.mu.Unlock()
			if live <= ceiling {
				breaches = 0
				continue
			}
			breaches++
			f.log.Info("Runaway breaker: live sandboxes over the ceiling", "live", live, "ceiling", ceiling, "breaches", breaches, "of", f.cfg.BreakerPolls)
			if breaches >= f.cfg.BreakerPolls {
				err := &OvercommitError{Live: live, Ceiling: ceiling, Expected: f.expected()}
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

// liveEntry is what one cluster entry of the fleet sees of the run: where
// (its API server and namespace), the run's live Pods there, and the Pods
// of the sandboxes the run gave back through it.
type liveEntry struct {
	where    string
	live     []string
	released map[string]bool
}

// countLive counts the run's live sandbox Pods over entries, each once:
// two entries may be the same cluster and namespace (one per node pool), and
// both trackers then see every Pod. A sandbox the run gave back through
// any entry is not counted while the garbage collector deletes its Pod —
// seconds in a burst of releases on a controller-manager held to its default
// 20 requests a second — or the breaker would trip on a run doing just what
// it means to. Given-back Pods no longer live are forgotten.
func countLive(entries []liveEntry) int {
	live, released := map[string]bool{}, map[string]bool{}
	for _, e := range entries {
		for _, name := range e.live {
			live[e.where+"/"+name] = true
		}
		for name := range e.released {
			released[e.where+"/"+name] = true
		}
	}
	n := 0
	for pod := range live {
		if !released[pod] {
			n++
		}
	}
	for _, e := range entries {
		for name := range e.released {
			if !live[e.where+"/"+name] {
				delete(e.released, name)
			}
		}
	}
	return n
}
