package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The cluster up leaves running is supervised as its Pods would be: the
// Agent Sandbox controller, killed, is started again; down stops the
// supervisor first and then everything, whatever it restarted.
func TestUpSupervisesAndDownStopsAll(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "localcluster")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "cluster")
	localcluster := func(verb string) string {
		out, err := exec.Command(bin, "-dir", dir, "-nodes", "1", verb).CombinedOutput()
		if err != nil {
			t.Fatalf("localcluster %s: %v\n%s", verb, err, out)
		}
		return string(out)
	}
	type state struct {
		Processes []struct {
			Name string
			PID  int
		}
		Supervisor *struct{ PID int }
	}
	read := func() state {
		var st state
		b, err := os.ReadFile(filepath.Join(dir, "state.json"))
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	pidOf := func(st state, name string) int {
		for _, p := range st.Processes {
			if p.Name == name {
				return p.PID
			}
		}
		t.Fatalf("no %s in %+v", name, st)
		return 0
	}
	alive := func(pid int) bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		return err == nil && !strings.Contains(string(b), ") Z ")
	}

	out := localcluster("up")
	down := false
	t.Cleanup(func() {
		if !down {
			_ = exec.Command(bin, "-dir", dir, "down").Run()
		}
	})
	if !strings.Contains(out, "a component that exits is started again") {
		t.Errorf("up does not say it supervises:\n%s", out)
	}
	st := read()
	if st.Supervisor == nil || !alive(st.Supervisor.PID) {
		t.Fatalf("up returned without a live supervisor: %+v", st)
	}
	controller := pidOf(st, "agent-sandbox-controller")
	if err := syscall.Kill(controller, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var again int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if pid := pidOf(read(), "agent-sandbox-controller"); pid != controller && alive(pid) {
			again = pid
			break
		}
	}
	if again == 0 {
		t.Fatalf("the killed Agent Sandbox controller (pid %d) was not started again", controller)
	}
	logged, _ := os.ReadFile(filepath.Join(dir, "logs", "agent-sandbox-controller.log"))
	if !strings.Contains(string(logged), "started again by the supervisor") {
		t.Errorf("the controller's log does not say it was started again")
	}

	last := read()
	localcluster("down")
	down = true
	if alive(st.Supervisor.PID) {
		t.Errorf("the supervisor (pid %d) outlived down", st.Supervisor.PID)
	}
	for _, p := range last.Processes {
		if alive(p.PID) {
			t.Errorf("%s (pid %d) outlived down", p.Name, p.PID)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("down left %s: %v", dir, err)
	}
}
