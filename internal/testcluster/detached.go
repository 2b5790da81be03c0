package testcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

const stateFile = "state.json"

// detachedState is what StopDetached needs to undo a detached Start.
type detachedState struct {
	Processes []detachedProcess `json:"processes"`
	Node      *realNode         `json:"node,omitempty"`
}

// saveState records the components' PIDs, and the real node's changes to
// the host, in the run directory.
func (c *Cluster) saveState() error {
	st := detachedState{Node: c.node}
	for _, p := range c.procs {
		st.Processes = append(st.Processes, detachedProcess{Name: p.name, PID: p.cmd.Process.Pid, Exe: p.cmd.Path})
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, stateFile), b, 0o644)
}

// Running reports whether dir holds a detached cluster with a live component.
func Running(dir string) bool {
	st, err := readState(dir)
	if err != nil {
		return false
	}
	for _, p := range st.Processes {
		if p.alive() {
			return true
		}
	}
	return false
}

// StopDetached stops the cluster a Detached Start left running in dir, newest
// component first, undoes a real node's changes to the host as Stop does,
// and removes dir. A PID whose executable is no longer the one recorded
// belongs to someone else now and is left alone.
func StopDetached(dir string) error {
	st, err := readState(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(st.Processes) - 1; i >= 0; i-- {
		p := st.Processes[i]
		// As in Stop: the kubelet (newer) is gone, and containerd must
		// still be up to tear its pods down.
		if st.Node != nil && p.Name == "containerd" && p.alive() {
			errs = append(errs, st.Node.removeAllPods())
		}
		errs = append(errs, p.stop(10*time.Second))
	}
	if st.Node != nil {
		errs = append(errs, st.Node.cleanHost())
		if len(st.Processes) > 0 {
			binDir := filepath.Dir(filepath.Dir(st.Processes[0].Exe))
			if left := st.Node.leftovers(binDir); len(left) > 0 {
				errs = append(errs, fmt.Errorf("the real node left behind: %s", strings.Join(left, "; ")))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func readState(dir string) (detachedState, error) {
	var st detachedState
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return st, fmt.Errorf("no cluster state in %s: %w", dir, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("reading %s: %w", filepath.Join(dir, stateFile), err)
	}
	return st, nil
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
