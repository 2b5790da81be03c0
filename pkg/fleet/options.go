package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/heartbeat"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// An Option says how the fleet Open opens is driven. Options are given
// once, at Open, and checked there: a fleet's way of running does not
// change under it.
type Option func(*driving)

// driving is what the Options of a fleet say.
type driving struct {
	// driver names what drives the run in its heartbeat Lease's holder.
	driver string
	// heartbeat is how long that Lease stays valid unrenewed.
	heartbeat time.Duration
	metrics   *metrics.Metrics
	// prepull has Run pre-pull the run's images, up to the nodes' disk
	// high-water mark highWater (in percent).
	prepull   bool
	highWater int32
	// session: the fleet is a session's (package session).
	session bool
}

// WithHeartbeat names what drives the run ("run", "serve", a trainer's
// name), in its heartbeat Lease's holder with this host and process, and
// how long the Lease stays valid unrenewed (at least 1s; 0: 30s).
// `reap --orphans` takes a run only once its Lease has expired. Without
// this option the driver is "fleet" and the Lease lasts 30s.
func WithHeartbeat(driver string, d time.Duration) Option {
	return func(o *driving) { o.driver, o.heartbeat = driver, d }
}

// WithMetrics has the run's figures recorded in m as they happen.
func WithMetrics(m *metrics.Metrics) Option {
	return func(o *driving) { o.metrics = m }
}

// WithPrepull has Run pre-pull the run's images on the nodes before any
// pool is warmed, as Fleet.PrepullImages does, and delete its
// PrepullJobs when it returns. A node starts no pull once its image
// filesystem is highWater percent full (1-100; 0:
// nodecache.DefaultHighWaterPercent).
func WithPrepull(highWater int32) Option {
	return func(o *driving) { o.prepull, o.highWater = true, highWater }
}

// ForSession opens the fleet of a session (package session), whose
// preflight also checks what a session does besides a run: record its
// state and patch its claims.
func ForSession() Option {
	return func(o *driving) { o.session = true }
}

// DefaultHeartbeat is how long a run's heartbeat Lease stays valid
// unrenewed when WithHeartbeat gives no duration.
const DefaultHeartbeat = heartbeat.DefaultDuration

// CheckHeartbeat refuses a heartbeat duration a Lease cannot hold (under
// a second), as Open does.
func CheckHeartbeat(d time.Duration) error { return heartbeat.Check(d) }

// HeartbeatLease is the name of run runID's heartbeat Lease, in the
// namespace of each of its clusters.
func HeartbeatLease(runID string) string { return heartbeat.Name(runID) }

// drivingOf applies opts over the defaults and checks the result.
func drivingOf(opts []Option) (driving, error) {
	d := driving{driver: "fleet"}
	for _, o := range opts {
		o(&d)
	}
	if d.heartbeat == 0 {
		d.heartbeat = DefaultHeartbeat
	}
	var errs []error
	if err := CheckHeartbeat(d.heartbeat); err != nil {
		errs = append(errs, fmt.Errorf("the heartbeat %w", err))
	}
	if d.prepull {
		if d.highWater == 0 {
			d.highWater = nodecache.DefaultHighWaterPercent
		}
		if err := nodecache.CheckHighWater(d.highWater); err != nil {
			errs = append(errs, fmt.Errorf("the prepull high-water mark %w", err))
		}
	}
	return d, errors.Join(errs...)
}

// Start readies the run before it creates anything: it checks every
// cluster (preflight: the Agent Sandbox API, the namespace, permissions,
// runtime class, pull secret) and starts the run's heartbeat on each.
// Run starts its run so; a session starts with it and stops the
// heartbeat (Heartbeats.Stop, or Let to hand the run over) when it ends.
// When Start fails nothing was created, and its error says so.
func (f *Fleet) Start(ctx context.Context) (*Heartbeats, error) {
	if err := f.preflight(ctx); err != nil {
		return nil, notStarted(ctx, err)
	}
	beats, err := f.startHeartbeats(ctx)
	if err != nil {
		return nil, notStarted(ctx, err)
	}
	return beats, nil
}

// notStarted is the error of a start that failed with err: ctx's cause
// when ctx ended (an interrupt: the checks' own errors would only say
// they were cut short), and that nothing was created.
func notStarted(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		err = cause
	}
	return fmt.Errorf("%w\n%w", err, ErrNothingCreated)
}

// ErrNothingCreated ends the error of a run or session that failed before
// it created anything: there is nothing to tear down or reap.
var ErrNothingCreated = errors.New("Nothing was created")
