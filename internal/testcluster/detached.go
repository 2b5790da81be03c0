package testcluster

import (
	"bytes"
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
	// Args and Env (beyond the starter's environment) are how it was
	// started, for Supervise to start it again.
	Args []string `json:"args,omitempty"`
	Env  []string `json:"env,omitempty"`
}

const stateFile = "state.json"

// detachedState is what StopDetached needs to undo a Start from another
// process: a detached cluster's, or one whose test process died without
// stopping it.
type detachedState struct {
	Processes []detachedProcess `json:"processes"`
	Node      *realNode         `json:"node,omitempty"`
	// Owner is the test process the cluster belongs to, none for a
	// detached one (it outlives its starter by design). A cluster whose
	// owner is gone is abandoned: the next Start reaps it.
	Owner *owner `json:"owner,omitempty"`
	// Supervisor is the process that keeps a detached cluster's
	// components running (Supervise), which StopDetached stops first.
	Supervisor *owner `json:"supervisor,omitempty"`
}

// owner names a process by PID and start time, so that a PID the kernel
// gave to another process since is not taken for it.
type owner struct {
	PID   int    `json:"pid"`
	Start string `json:"start"`
}

// self is the running process as an owner.
func self() (*owner, error) {
	start, err := startTime(os.Getpid())
	if err != nil {
		return nil, err
	}
	return &owner{PID: os.Getpid(), Start: start}, nil
}

// startTime is when pid started, in clock ticks since boot (the 22nd field
// of /proc/PID/stat, counted after the command's closing parenthesis).
func startTime(pid int) (string, error) {
	start, _, err := procStat(pid)
	return start, err
}

// procStat reads pid's start time and state (the 3rd field: Z for a
// zombie, which has exited but not been waited for).
func procStat(pid int) (start, state string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", "", err
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 20 {
		return "", "", fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return fields[19], fields[0], nil
}

func (o *owner) alive() bool {
	start, state, err := procStat(o.PID)
	return err == nil && start == o.Start && state != "Z"
}

// saveState records the components' PIDs, and the real node's changes to
// the host, in the run directory; owned says the cluster belongs to this
// process.
func (c *Cluster) saveState(owned bool) error {
	st := detachedState{Node: c.node}
	if owned {
		o, err := self()
		if err != nil {
			return err
		}
		st.Owner = o
	}
	for _, p := range c.procs {
		st.Processes = append(st.Processes, detachedProcess{Name: p.name, PID: p.cmd.Process.Pid, Exe: p.cmd.Path, Args: p.args, Env: p.env})
	}
	return writeState(c.dir, st)
}

// writeState replaces dir's state whole, so that a reader never sees a
// part of it.
func writeState(dir string, st detachedState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".new")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
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
	if s := st.Supervisor; s != nil && s.alive() {
		// First, or it would start again what is stopped; then the
		// state as it left it, with the PIDs of what it restarted.
		if err := s.stop(10 * time.Second); err != nil {
			return err
		}
		if st, err = readState(dir); err != nil {
			return err
		}
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
	if st.Node != nil && len(st.Processes) > 0 {
		binDir := filepath.Dir(filepath.Dir(st.Processes[0].Exe))
		// Without containerd (a killed suite's died with it) its shims
		// and their containers are what is left of the pods.
		errs = append(errs, st.Node.killRemaining(binDir), st.Node.cleanHost())
		if left := st.Node.leftovers(binDir); len(left) > 0 {
			errs = append(errs, fmt.Errorf("the real node left behind: %s", strings.Join(left, "; ")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// reapAbandoned stops the clusters in the run directories matching pattern
// whose test process is gone — one killed, or panicking at its -timeout,
// before it could stop its cluster — as StopDetached does. Clusters of live
// processes, and detached ones, are left alone.
func reapAbandoned(pattern string) error {
	dirs, err := filepath.Glob(pattern)
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range dirs {
		st, err := readState(dir)
		if err != nil || st.Owner == nil || st.Owner.alive() {
			continue
		}
		if err := StopDetached(dir); err != nil {
			errs = append(errs, fmt.Errorf("reaping the abandoned test cluster in %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
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

// stop stops the process o names and waits until it is gone: SIGTERM,
// then SIGKILL after grace.
func (o *owner) stop(grace time.Duration) error {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := syscall.Kill(o.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stopping pid %d: %w", o.PID, err)
		}
		for deadline := time.Now().Add(grace); o.alive() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		if !o.alive() {
			return nil
		}
	}
	return fmt.Errorf("pid %d outlived SIGKILL", o.PID)
}
