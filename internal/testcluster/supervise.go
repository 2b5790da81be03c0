package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Supervision's back-off: a component that exits is started again after
// restartBackoff, doubled each time it exits again within stableFor of its
// start, up to maxRestartBackoff — as the kubelet backs off a crashing
// container.
const (
	restartBackoff    = time.Second
	maxRestartBackoff = 30 * time.Second
	stableFor         = time.Minute
)

// nextBackoff is how long a component that exited after running for ran
// waits to start again, its last back-off having been last (0: none yet):
// the first, or after it stayed up stableFor, restartBackoff; then double
// the last, up to maxRestartBackoff.
func nextBackoff(last, ran time.Duration) time.Duration {
	if last == 0 || ran >= stableFor {
		return restartBackoff
	}
	return min(2*last, maxRestartBackoff)
}

// Supervise keeps the detached cluster in dir running as the nodes of a
// real cluster keep its control plane and controllers: a component that
// exits — the Agent Sandbox controller does by design when it cannot renew
// its leader Lease, as while the API server is unreachable — is started
// again with the arguments it was started with, after a back-off, and the
// restart is noted in its log. It records itself in the cluster's state,
// so that StopDetached stops it first, and it returns when ctx ends or the
// cluster's state is gone. One supervisor per cluster: it refuses to start
// beside a live one.
func Supervise(ctx context.Context, dir string) error {
	st, err := readState(dir)
	if err != nil {
		return err
	}
	if st.Supervisor != nil && st.Supervisor.alive() {
		return fmt.Errorf("the cluster in %s is supervised already, by pid %d", dir, st.Supervisor.PID)
	}
	if st.Supervisor, err = self(); err != nil {
		return err
	}
	if err := writeState(dir, st); err != nil {
		return err
	}
	n := len(st.Processes)
	started, backoff, next := make([]time.Time, n), make([]time.Duration, n), make([]time.Time, n)
	for i := range started {
		started[i] = time.Now()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if _, err := os.Stat(filepath.Join(dir, stateFile)); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		changed := false
		for i, p := range st.Processes {
			now := time.Now()
			if p.alive() {
				continue
			}
			if next[i].IsZero() {
				// Just found exited: it waits out a back-off.
				backoff[i] = nextBackoff(backoff[i], now.Sub(started[i]))
				next[i] = now.Add(backoff[i])
				continue
			}
			if now.Before(next[i]) {
				continue
			}
			logs := filepath.Join(dir, "logs")
			np, err := startProcess(p.Name, p.Exe, p.Args, p.Env, logs, true, nil)
			if err != nil {
				noteInLog(filepath.Join(logs, p.Name+".log"), fmt.Sprintf("exited; starting it again failed: %v", err))
				next[i] = now.Add(backoff[i])
				continue
			}
			noteInLog(np.logPath, fmt.Sprintf("exited; started again by the supervisor, as its Pod would be, as pid %d", np.Pid()))
			st.Processes[i].PID, started[i], next[i] = np.Pid(), now, time.Time{}
			changed = true
		}
		if changed {
			if err := writeState(dir, st); err != nil {
				return err
			}
		}
	}
}

// Supervised reports whether the detached cluster in dir has a live
// supervisor.
func Supervised(dir string) bool {
	st, err := readState(dir)
	return err == nil && st.Supervisor != nil && st.Supervisor.alive()
}
