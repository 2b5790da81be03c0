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
	if d <= 0 {
		d = heartbeat.DefaultDuration
	}
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s@%s/%d", driver, host, os.Getpid())
	var beats []*heartbeat.Heartbeat
	stop = func(ctx context.Context) error {
		var errs []error
		for _, b := range beats {
			errs = append(errs, b.Stop(ctx))
		}
		return errors.Join(errs...)
	}
	for _, c := range f.Clusters {
		b, err := heartbeat.Start(ctx, c.Clients.Kube, c.Namespace(), f.RunID, holder, d)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("cluster %s: %w", c.Name, err), stop(ctx))
		}
		beats = append(beats, b)
	}
	return stop, nil
}
