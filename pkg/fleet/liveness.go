package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/heartbeat"
)

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

// startHeartbeats starts the run's heartbeat Lease on every cluster, held
// by the fleet's driver on this host and process.
func (f *Fleet) startHeartbeats(ctx context.Context) (*Heartbeats, error) {
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s@%s/%d", f.driving.driver, host, os.Getpid())
	beats := &Heartbeats{}
	for _, c := range f.clusters {
		b, err := heartbeat.Start(ctx, c.Clients.Kube, c.Namespace(), f.runID, holder, f.driving.heartbeat)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("cluster %s: %w", c.Name, err), beats.Stop(ctx))
		}
		beats.beats = append(beats.beats, b)
	}
	return beats, nil
}
