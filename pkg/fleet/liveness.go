package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/heartbeat"
)

// StartHeartbeats starts the run's heartbeat Lease on every cluster, held
// by driver (e.g. "run" or "serve") on this host and process, valid for d
// unrenewed (0: 30s). The returned func stops them and deletes the Leases: call it
// once the run's objects are gone. Until then `reap --orphans` leaves the
// run alone.
func (f *Fleet) StartHeartbeats(ctx context.Context, driver string, d time.Duration) (stop func(context.Context) error, err error) {
	beats, err := f.startHeartbeats(ctx, driver, d)
	if err != nil {
		return nil, err
	}
	return beats.Stop, nil
}

// Heartbeats are a run's heartbeats on its clusters.
type Heartbeats struct{ beats []*heartbeat.Heartbeat }

// Stop stops them and deletes their Leases: the run has ended.
func (hs *Heartbeats) Stop(ctx context.Context) error {
	var errs []error
	for _, b := range hs.beats {
		errs = append(errs, b.Stop(ctx))
	}
	return errors.Join(errs...)
}

// Let stops them and lets the run go, for another driver to take it
// over at once.
func (hs *Heartbeats) Let(ctx context.Context) error {
	var errs []error
	for _, b := range hs.beats {
		errs = append(errs, b.Let(ctx))
	}
	return errors.Join(errs...)
}

// StartSessionHeartbeats is StartHeartbeats for a session, which may also
// let its run go (Heartbeats.Let) for a resumed session to take over.
func (f *Fleet) StartSessionHeartbeats(ctx context.Context, d time.Duration) (*Heartbeats, error) {
	return f.startHeartbeats(ctx, "serve", d)
}

func (f *Fleet) startHeartbeats(ctx context.Context, driver string, d time.Duration) (*Heartbeats, error) {
	if d <= 0 {
		d = heartbeat.DefaultDuration
	}
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s@%s/%d", driver, host, os.Getpid())
	beats := &Heartbeats{}
	for _, c := range f.Clusters {
		b, err := heartbeat.Start(ctx, c.Clients.Kube, c.Namespace(), f.RunID, holder, d)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("cluster %s: %w", c.Name, err), beats.Stop(ctx))
		}
		beats.beats = append(beats.beats, b)
	}
	return beats, nil
}
