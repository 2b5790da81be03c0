package testcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// detachedProcess records a component of a detached cluster, so that a later
// process can stop exactly the processes this one started.
type detachedProcess struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	Exe  string `json:"exe"`
}

const stateFile = "processes.json"

// saveState records the components' PIDs in the run directory.
func (c *Cluster) saveState() error {
	procs := make([]detachedProcess, 0, len(c.procs))
	for _, p := range c.procs {
		procs = append(procs, detachedProcess{Name: p.name, PID: p.cmd.Process.Pid, Exe: p.cmd.Path})
	}
	b, err := json.MarshalIndent(procs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, stateFile), b, 0o644)
}

// Running reports whether dir holds a detached cluster with a live component.
func Running(dir string) bool {
	procs, err := readState(dir)
	if err != nil {
		return false
	}
	for _, p := range procs {
		if p.alive() {
			return true
		}
	}
	return false
}

// StopDetached stops the cluster a Detached Start left running in dir, newest
// component first, and removes dir. A PID whose executable is no longer the
// one recorded belongs to someone else now and is left alone.
func StopDetached(dir string) error {
	procs, err := readState(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].stop(10*time.Second))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func readState(dir string) ([]detachedProcess, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("no cluster state in %s: %w", dir, err)
	}
	var procs []detachedProcess
	if err := json.Unmarshal(b, &procs); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, stateFile), err)
	}
	return procs, nil
}

func (p detachedProcess) alive() bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
	return err == nil && exe == p.Exe
}

func (p detachedProcess) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	// Each component leads its own session and so its own process group.
	if err := syscall.Kill(-p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.Name, p.PID, err)
	}
	for deadline := time.Now().Add(grace); p.alive() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if p.alive() {
		if err := syscall.Kill(-p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing %s (pid %d): %w", p.Name, p.PID, err)
		}
	}
	return nil
}
