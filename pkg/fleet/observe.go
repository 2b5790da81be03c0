package fleet

import (
	"sync/atomic"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// stats are live counters for progress displays.
type stats struct {
	total, done, failed, warming, running atomic.Int64
	started                               atomic.Int64 // unix nanoseconds
}

// Progress is a snapshot of a run's counters.
type Progress struct {
	// Total counts tasks over all epochs; Done those finished, Failed of them.
	Total, Done, Failed int
	// Warming is how many images are being warmed, Running how many tasks
	// hold a sandbox or wait for one.
	Warming, Running int
	// Pulling sums what the nodes of the run's Pods that wait to be Ready
	// are fetching, as their node agents report it: the bytes of the
	// layers fetching (Size is theirs, not the images'), and the rate.
	Pulling nodecache.Pull
	// ControllerDown is how long the Agent Sandbox controller of a cluster
	// has been down — no replica renewing its leader Lease — the longest
	// over the clusters; 0 while every one leads (or cannot be seen).
	ControllerDown time.Duration
	Elapsed        time.Duration
}

// Progress returns the run's counters now. It is safe to call at any time.
func (f *Fleet) Progress() Progress {
	p := Progress{Total: int(f.stats.total.Load()), Done: int(f.stats.done.Load()), Failed: int(f.stats.failed.Load()),
		Warming: int(f.stats.warming.Load()), Running: int(f.stats.running.Load())}
	for _, c := range f.clusters {
		p.Pulling = p.Pulling.Plus(c.tracker.Pulling())
		if s := c.controller.State(); s.Down {
			p.ControllerDown = max(p.ControllerDown, time.Since(s.Since))
		}
	}
	if s := f.stats.started.Load(); s != 0 {
		p.Elapsed = time.Since(time.Unix(0, s))
	}
	return p
}

// The observers below feed the run report and, when set, the metrics.

func (f *Fleet) phase(name, cluster string, d time.Duration) {
	f.rec.Phase(name, d)
	if m := f.driving.metrics; m != nil {
		m.Phase(name, cluster, d)
	}
}

func (f *Fleet) claimed(cluster string, ok, warm bool, d time.Duration) {
	f.rec.Claim(warm)
	f.phase("claim", cluster, d)
	if m := f.driving.metrics; m != nil {
		m.Claim(cluster, ok)
	}
}

func (f *Fleet) warmed(cluster string, n int) {
	if n == 0 {
		return
	}
	f.rec.Warm(n)
	if m := f.driving.metrics; m != nil {
		m.Warm(cluster, n)
	}
}

func (f *Fleet) finished(cluster string, ok, ran bool, d time.Duration) {
	f.rec.Task(ok, ran)
	f.stats.done.Add(1)
	if !ok {
		f.stats.failed.Add(1)
	}
	if m := f.driving.metrics; m != nil {
		m.Task(cluster, ok, d)
	}
}

// throttled sums what the clusters' client-side rate limiters delayed, or
// is nil when they delayed nothing.
func (f *Fleet) throttled() *report.Throttled {
	var t report.Throttled
	for _, c := range f.clusters {
		if c.Clients.Throttle == nil {
			continue
		}
		d := c.Clients.Throttle.Delayed()
		t.Requests += d.Requests
		t.TotalSeconds += d.Total.Seconds()
		t.MaxSeconds = max(t.MaxSeconds, d.Max.Seconds())
	}
	if t.Requests == 0 {
		return nil
	}
	return &t
}
