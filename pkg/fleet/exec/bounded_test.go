package exec_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	osexec "os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
)

// gone waits until pid has exited (and been reaped, or is a zombie).
func gone(t *testing.T, pid int) bool {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// A command past its timeout is killed with what it started in the
// background, and reported as timeout(1) reports it, with its output.
func TestBoundedKillsTheTree(t *testing.T) {
	var stdout, stderr bytes.Buffer
	start := time.Now()
	r, err := exec.Bounded(t.Context(), local, exec.Request{
		Command: []string{"sh", "-c", "sleep 600 & echo $!; echo err >&2; sleep 600"}, Stdout: &stdout, Stderr: &stderr,
	}, 300*time.Millisecond)
	if err != nil || !r.TimedOut || r.ExitCode != exec.TimeoutExitCode {
		t.Fatalf("Bounded = %+v, %v; want timed out with 124", r, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s to stop", d)
	}
	// The shell may say its command was killed; the PID line is not for it.
	if !strings.HasPrefix(stderr.String(), "err\n") || strings.Contains(stderr.String(), "sandbox-fleet-pid") {
		t.Errorf("stderr %q: the PID line must not reach it", stderr.String())
	}
	bg, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if err != nil {
		t.Fatalf("stdout %q", stdout.String())
	}
	if !gone(t, bg) {
		t.Errorf("the background sleep %d outlived the timeout", bg)
	}
}

func TestBoundedWithinItsTime(t *testing.T) {
	var stderr bytes.Buffer
	r, err := exec.Bounded(t.Context(), local, exec.Request{Command: []string{"sh", "-c", "printf e >&2; exit 3"}, Stderr: &stderr}, time.Minute)
	if err != nil || r.TimedOut || r.ExitCode != 3 || stderr.String() != "e" {
		t.Errorf("Bounded = %+v, %v, stderr %q; want exit 3 and stderr e", r, err, stderr.String())
	}
	r, err = exec.Bounded(t.Context(), local, exec.Request{Command: []string{"true"}}, 0)
	if err != nil || r.ExitCode != 0 {
		t.Errorf("no timeout: %+v, %v", r, err)
	}
}

// The signalling script runs in every shell an image may have: dash,
// bash, busybox.
func TestSignalEveryShell(t *testing.T) {
	for _, shell := range [][]string{{"sh"}, {"bash"}, {"busybox", "sh"}} {
		if _, err := osexec.LookPath(shell[0]); err != nil {
			t.Logf("%s: not on this machine", shell[0])
			continue
		}
		t.Run(shell[0], func(t *testing.T) {
			inShell := func(ctx context.Context, r exec.Request) (int, error) {
				if r.Command[0] == "sh" {
					r.Command = append(append([]string{}, shell...), r.Command[1:]...)
				}
				return local(ctx, r)
			}
			cmd := osexec.Command("sh", "-c", "sleep 600 & echo $!; while :; do sleep 1; done")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			bg, _ := strconv.Atoi(strings.TrimSpace(line))
			// Children: the sleeps go, the shell stays.
			if err := exec.Signal(t.Context(), inShell, "", "TERM", cmd.Process.Pid, exec.Children); err != nil {
				t.Fatal(err)
			}
			if !gone(t, bg) {
				t.Errorf("SIGTERM to the children left %d", bg)
			}
			if err := exec.Signal(t.Context(), inShell, "", "KILL", cmd.Process.Pid, exec.Tree); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("the shell after SIGKILL to its tree: %v", err)
			}
		})
	}
}

// A process: its output as it comes, stdin while it runs, a signal it
// handles, its exit.
func TestProcess(t *testing.T) {
	p := exec.StartProcess(t.Context(), local, exec.Request{Command: []string{"sh", "-c",
		`trap 'echo got INT; exit 7' INT; echo ready; read line; echo "read $line" >&2; while :; do sleep 0.1; done`}})
	defer p.Stop(t.Context())
	var seen []exec.Event
	next, err := p.Events(t.Context(), 0, func(e exec.Event) error {
		seen = append(seen, e)
		return errStop
	})
	if !errors.Is(err, errStop) || len(seen) != 1 || string(seen[0].Data) != "ready\n" || next != 0 {
		t.Fatalf("first event %+v, %v", seen, err)
	}
	if err := p.WriteStdin([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	// Wait for the line read before interrupting.
	idx := 1
	for {
		var e exec.Event
		idx, err = p.Events(t.Context(), idx, func(ev exec.Event) error { e = ev; return errStop })
		if string(e.Data) == "read hello\n" {
			break
		}
		if err != nil && !errors.Is(err, errStop) {
			t.Fatal(err)
		}
		idx++
	}
	if err := p.Signal(t.Context(), "INT"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r, err := p.Wait(ctx)
	if err != nil || r.ExitCode != 7 {
		t.Fatalf("Wait = %+v, %v; want exit 7", r, err)
	}
	var all []string
	if _, err := p.Events(t.Context(), 0, func(e exec.Event) error {
		if e.End {
			all = append(all, "end")
		} else {
			all = append(all, e.Stream+":"+string(e.Data))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(all, "|") != "stdout:ready\n|stderr:read hello\n|stdout:got INT\n|end" {
		t.Errorf("events %q", all)
	}
}

var errStop = errors.New("stop")

func TestValidSignal(t *testing.T) {
	for in, want := range map[string]string{"INT": "INT", "sigterm": "TERM", "SIGKILL": "KILL", "usr1": "USR1", "STOP": "", "": "", "9": ""} {
		got, ok := exec.ValidSignal(in)
		if got != want || ok != (want != "") {
			t.Errorf("ValidSignal(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// A caller that gives up before the timeout does not leave the command
// running: it is killed with what it started.
func TestBoundedStopsWithItsCaller(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	out, w := io.Pipe()
	defer out.Close()
	result := make(chan error, 1)
	go func() {
		_, err := exec.Bounded(ctx, local, exec.Request{Command: []string{"sh", "-c", "sleep 600 & echo $!; sleep 600"}, Stdout: w}, time.Hour)
		result <- err
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Errorf("Bounded after its caller left = %v, want context.Canceled", err)
	}
	bg, _ := strconv.Atoi(strings.TrimSpace(line))
	if !gone(t, bg) {
		t.Errorf("the background sleep %d outlived its caller", bg)
	}
}
