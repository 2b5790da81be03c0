package testcluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A cluster whose test process died (killed, or panicking at its -timeout)
// is reaped by the next Start: its components are stopped and its run
// directory removed. One whose owner lives, and a detached one, stay.
func TestReapAbandoned(t *testing.T) {
	root := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	component := func() (*exec.Cmd, detachedProcess) {
		cmd := exec.Command("sleep", "600")
		// As the components do, it leads a process group of its own.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "exe"))
		if err != nil {
			t.Fatal(err)
		}
		return cmd, detachedProcess{Name: "sleeper", PID: cmd.Process.Pid, Exe: exe}
	}
	clusters := map[string]*owner{
		"abandoned": {PID: gone.Process.Pid, Start: "1"},
		"owned":     me,
		"detached":  nil,
	}
	procs := map[string]*exec.Cmd{}
	for name, o := range clusters {
		cmd, p := component()
		procs[name] = cmd
		dir := filepath.Join(root, "sandbox-fleet-cluster-"+name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(detachedState{Processes: []detachedProcess{p}, Owner: o})
		if err := os.WriteFile(filepath.Join(dir, stateFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A directory without state (kept logs) is no cluster.
	if err := os.MkdirAll(filepath.Join(root, "sandbox-fleet-cluster-logs", "logs"), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := reapAbandoned(filepath.Join(root, "sandbox-fleet-cluster-*")); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- procs["abandoned"].Wait() }()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Error("the abandoned cluster's component still runs")
	}
	for name, want := range map[string]bool{"abandoned": false, "owned": true, "detached": true, "logs": true} {
		_, err := os.Stat(filepath.Join(root, "sandbox-fleet-cluster-"+name))
		if exists := err == nil; exists != want {
			t.Errorf("%s: run directory exists %v, want %v", name, exists, want)
		}
	}
	for _, name := range []string{"owned", "detached"} {
		if procs[name].ProcessState != nil {
			t.Errorf("the %s cluster's component was stopped", name)
		}
	}
}
