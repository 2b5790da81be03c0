package exec_test

import (
	"context"
	"os"
	osexec "os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
)

// container is a PID namespace of its own, as a container's: its PID 1
// (sleep) and a Runner that enters it as the exec API enters a container,
// from outside, so that what it runs has parent PID 0 there.
type container struct {
	init *osexec.Cmd
	pid  int // PID 1's, on this machine
}

func newContainer(t *testing.T) *container {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	// --kill-child: the namespace's PID 1 dies with unshare, and the
	// kernel then ends every process of the namespace.
	c := &container{init: osexec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "sleep", "3600")}
	c.init.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.init.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.init.Process.Kill()
		_ = c.init.Wait()
	})
	deadline := time.Now().Add(5 * time.Second)
	for c.pid == 0 && time.Now().Before(deadline) {
		children, _ := os.ReadFile("/proc/" + strconv.Itoa(c.init.Process.Pid) + "/task/" + strconv.Itoa(c.init.Process.Pid) + "/children")
		if f := strings.Fields(string(children)); len(f) > 0 {
			c.pid, _ = strconv.Atoi(f[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.pid == 0 {
		t.Fatal("the namespace's PID 1 did not start")
	}
	return c
}

func (c *container) run(ctx context.Context, r exec.Request) (int, error) {
	r.Command = append([]string{"nsenter", "-t", strconv.Itoa(c.pid), "-p", "-m", "--"}, r.Command...)
	return local(ctx, r)
}

// start runs argv in the container and leaves it running, as a dead
// driver leaves its commands.
func (c *container) start(t *testing.T, argv ...string) {
	t.Helper()
	cmd := osexec.Command("nsenter", append([]string{"-t", strconv.Itoa(c.pid), "-p", "-m", "--"}, argv...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// inside lists the container's processes: their command lines.
func (c *container) inside(t *testing.T) string {
	t.Helper()
	var out strings.Builder
	if _, err := c.run(t.Context(), exec.Request{Command: []string{"sh", "-c", `for d in /proc/[0-9]*; do tr '\0' ' ' <$d/cmdline; echo; done`}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// What a dead driver left running (an exec, a shell with its command) is
// stopped with what it started; the container's own PID 1, and what a
// command left to it on purpose (a daemon, reparented to PID 1), stay.
func TestStopStrays(t *testing.T) {
	c := newContainer(t)
	c.start(t, "sh", "-c", "sleep 301 & sleep 302")
	c.start(t, "sh", "-c", "while :; do sleep 303; done")
	if _, err := c.run(t.Context(), exec.Request{Command: []string{"sh", "-c", "sleep 304 >/dev/null 2>&1 &"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(c.inside(t), "sleep 303") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	n, err := exec.StopStrays(t.Context(), c.run, "")
	if err != nil || n != 2 {
		t.Fatalf("StopStrays = %d, %v; want the 2 commands left running", n, err)
	}
	left := c.inside(t)
	for _, gone := range []string{"sleep 301", "sleep 302", "sleep 303", "while"} {
		if strings.Contains(left, gone) {
			t.Errorf("%q still runs:\n%s", gone, left)
		}
	}
	for _, kept := range []string{"sleep 3600", "sleep 304"} {
		if !strings.Contains(left, kept) {
			t.Errorf("%q was stopped:\n%s", kept, left)
		}
	}
	if n, err := exec.StopStrays(t.Context(), c.run, ""); err != nil || n != 0 {
		t.Errorf("StopStrays again = %d, %v; want nothing left to stop", n, err)
	}
}
