package exec_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
)

// localShell is a Shell over sh on this machine, run with the Request's
// streams as an exec would: the framing is the shell's and the Shell's,
// whatever carries the streams.
func localShell(t *testing.T) *exec.Shell {
	t.Helper()
	sh := exec.OpenShell(t.Context(), local, exec.Request{}, exec.ShellSh)
	t.Cleanup(func() { _ = sh.Close() })
	return sh
}

// local runs r on this machine as an exec runs it in a container: in a
// process group of its own (runc makes an exec's process a session
// leader), its streams copied.
func local(ctx context.Context, r exec.Request) (int, error) {
	cmd := osexec.CommandContext(ctx, r.Command[0], r.Command[1:]...)
	cmd.Stdout, cmd.Stderr = r.Stdout, r.Stderr
	// The shell and what it started go together, as a container's
	// processes go with its exec; stdin is copied apart, as an exec
	// stream does, so that the end of the shell is not held by it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	if r.Stdin != nil {
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 0, err
		}
		go func() {
			_, _ = io.Copy(stdin, r.Stdin)
			stdin.Close()
		}()
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	err := cmd.Wait()
	var exit *osexec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	return 0, err
}

func run(t *testing.T, sh *exec.Shell, stdin []byte, argv ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	r, err := sh.Run(t.Context(), exec.Command{Argv: argv, Stdin: stdin}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	return stdout.String(), stderr.String(), r.ExitCode
}

func TestShellKeepsOutputAndExitCodesExact(t *testing.T) {
	sh := localShell(t)
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	big := strings.Repeat("0123456789abcdef", 1<<14)
	for _, tc := range []struct {
		name           string
		stdin          []byte
		argv           []string
		stdout, stderr string
		code           int
	}{
		{name: "a line", argv: []string{"echo", "hello"}, stdout: "hello\n"},
		{name: "no trailing newline", argv: []string{"printf", "%s", "no newline"}, stdout: "no newline"},
		{name: "nothing", argv: []string{"true"}},
		{name: "only newlines", argv: []string{"printf", `\n\n`}, stdout: "\n\n"},
		{name: "every byte", stdin: all, argv: []string{"cat"}, stdout: string(all)},
		{name: "stdin read exactly", stdin: []byte("a\nb"), argv: []string{"sh", "-c", "cat; echo done >&2"}, stdout: "a\nb", stderr: "done\n"},
		{name: "no stdin", argv: []string{"cat"}},
		{name: "stderr apart", argv: []string{"sh", "-c", "printf out; printf err >&2; exit 3"}, stdout: "out", stderr: "err", code: 3},
		{name: "quotes in argv", argv: []string{"printf", "%s|", "it's", `"q"`, "$HOME", "a b"}, stdout: `it's|"q"|$HOME|a b|`},
		{name: "large output", argv: []string{"printf", "%s", big}, stdout: big},
		{name: "killed by a signal", argv: []string{"sh", "-c", "kill -9 $$"}, code: 137},
		{name: "exit does not end the shell", argv: []string{"sh", "-c", "exit 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, sh, tc.stdin, tc.argv...)
			if stdout != tc.stdout || stderr != tc.stderr || code != tc.code {
				t.Errorf("got stdout %q, stderr %q, code %d; want %q, %q, %d", trim(stdout), trim(stderr), code, trim(tc.stdout), trim(tc.stderr), tc.code)
			}
		})
	}
	for code := range 256 {
		if _, _, got := run(t, sh, nil, "sh", "-c", "exit "+strconv.Itoa(code)); got != code {
			t.Errorf("exit %d came back as %d", code, got)
		}
	}
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Commands do not reach each other: each runs in a subshell.
func TestShellCommandsAreApart(t *testing.T) {
	sh := localShell(t)
	run(t, sh, nil, "sh", "-c", "cd /; X=1; export X")
	if out, _, _ := run(t, sh, nil, "sh", "-c", `echo "${X:-unset}"`); out != "unset\n" {
		t.Errorf("a variable of an earlier command is seen: %q", out)
	}
	if out, _, _ := run(t, sh, []byte("x"), "sh", "-c", "exec cat"); out != "x" {
		t.Errorf("exec in a command = %q", out)
	}
	if out, _, _ := run(t, sh, nil, "echo", "still here"); out != "still here\n" {
		t.Errorf("after exec: %q", out)
	}
}

// A command past its timeout is stopped, and the shell runs the next.
func TestShellTimeoutStopsTheCommand(t *testing.T) {
	sh := localShell(t)
	start := time.Now()
	var out bytes.Buffer
	r, err := sh.Run(t.Context(), exec.Command{Script: "echo started; sleep 30 & sleep 30", Timeout: 300 * time.Millisecond}, &out, nil)
	if err != nil || !r.TimedOut || r.ExitCode != exec.TimeoutExitCode || out.String() != "started\n" {
		t.Fatalf("Run past its timeout = %+v, %v, output %q; want timed out, 124, the output so far", r, err, out.String())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the timed-out command took %s to stop", d)
	}
	if got, _, _ := run(t, sh, nil, "echo", "next"); got != "next\n" {
		t.Errorf("after a timeout: %q", got)
	}
}

// A command that outlives its context is stopped and ctx's error returned;
// the shell stays.
func TestShellCommandStoppedWithItsContext(t *testing.T) {
	sh := localShell(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := sh.Run(ctx, exec.Command{Argv: []string{"sleep", "30"}}, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run past its context = %v, want its deadline", err)
	}
	if got, _, _ := run(t, sh, nil, "echo", "next"); got != "next\n" {
		t.Errorf("after the context ended: %q", got)
	}
}

// A loop of builtins cannot be signalled apart from the shell: the shell
// goes, and says so.
func TestShellBrokenByAnUnstoppableCommand(t *testing.T) {
	sh := localShell(t)
	r, err := sh.Run(t.Context(), exec.Command{Script: "while :; do :; done", Timeout: 200 * time.Millisecond}, nil, nil)
	if !errors.Is(err, exec.ErrBroken) {
		t.Fatalf("Run of a builtin loop past its timeout = %+v, %v, want ErrBroken", r, err)
	}
	if _, err := sh.Run(t.Context(), exec.Command{Argv: []string{"true"}}, nil, nil); !errors.Is(err, exec.ErrBroken) {
		t.Errorf("Run on a broken shell = %v, want ErrBroken", err)
	}
}

// Scripts are run by the shell itself: what one sets, the next sees.
func TestShellScriptsKeepState(t *testing.T) {
	sh := localShell(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		script, stdout, stderr string
		code                   int
		merge                  bool
	}{
		{script: "cd " + exec.Quote(dir) + "; export X=1; f() { echo \"f $1\"; }"},
		{script: "pwd; echo $X; f a", stdout: dir + "\n1\nf a\n"},
		{script: "echo out; echo err >&2; false", stdout: "out\n", stderr: "err\n", code: 1},
		{script: "echo out; echo err >&2", stdout: "out\nerr\n", merge: true},
		{script: "if then", code: 2},
		{script: "no-such-command-here", code: 127},
		{script: "echo $X", stdout: "1\n"},
	} {
		var stdout, stderr bytes.Buffer
		r, err := sh.Run(t.Context(), exec.Command{Script: tc.script, MergeStderr: tc.merge}, &stdout, &stderr)
		if err != nil || r.ExitCode != tc.code || stdout.String() != tc.stdout || (tc.stderr != "" && stderr.String() != tc.stderr) {
			t.Errorf("%q = %+v, %v, stdout %q, stderr %q; want %d, %q, %q", tc.script, r, err, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
	if _, err := sh.Run(t.Context(), exec.Command{Script: "cat", Stdin: []byte("x")}, nil, nil); err == nil {
		t.Error("a script with stdin was taken: it would run in a subshell")
	}
	r, err := sh.Run(t.Context(), exec.Command{Script: "exit 3"}, nil, nil)
	if err != nil || !r.Exited || r.ExitCode != 3 {
		t.Errorf("exit 3 = %+v, %v; want the shell exited 3", r, err)
	}
}

// Interrupt is Ctrl-C for the command running: sleep ends with 130, and
// the shell runs the next command.
func TestShellInterrupt(t *testing.T) {
	sh := localShell(t)
	done := make(chan exec.Result, 1)
	go func() {
		r, err := sh.Run(t.Context(), exec.Command{Script: "sleep 30"}, nil, nil)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := sh.Interrupt(t.Context()); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			if r.ExitCode != 130 || r.TimedOut {
				t.Errorf("interrupted sleep = %+v, want exit 130", r)
			}
			if got, _, _ := run(t, sh, nil, "echo", "next"); got != "next\n" {
				t.Errorf("after an interrupt: %q", got)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the interrupt did not end sleep")
		}
	}
}

// A shell that dies (here with its process group, as a container's
// processes do) breaks the Shell.
func TestShellBrokenWhenTheShellExits(t *testing.T) {
	sh := localShell(t)
	if _, err := sh.Run(t.Context(), exec.Command{Argv: []string{"sh", "-c", "kill -9 0"}}, nil, nil); !errors.Is(err, exec.ErrBroken) {
		t.Errorf("Run as the shell was killed = %v, want ErrBroken", err)
	}
}

// Ready returns once the shell runs, and a shell that cannot start fails
// there.
func TestShellReady(t *testing.T) {
	sh := localShell(t)
	if err := sh.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := run(t, sh, nil, "echo", "after"); got != "after\n" {
		t.Errorf("after Ready: %q", got)
	}
	none := exec.OpenShell(t.Context(), func(context.Context, exec.Request) (int, error) {
		return 127, nil // as an image without sh
	}, exec.Request{}, exec.ShellSh)
	defer none.Close()
	if err := none.Ready(t.Context()); !errors.Is(err, exec.ErrBroken) {
		t.Errorf("Ready of a shell that exited = %v, want ErrBroken", err)
	}
}

// A process in the sandbox that reads the shell's stdin through
// /proc/<shell>/fd/0 while a command runs takes no marker: the shell read
// it into a variable before the command started, and what is left of the
// text names the variable. So it cannot forge a command's end or exit
// code; the most it can do is take the rest of the text, and the shell
// then never reports the command's end: the Shell is broken, no result.
func TestShellMarkerUnreadable(t *testing.T) {
	programs := []string{exec.ShellSh}
	if _, err := osexec.LookPath("bash"); err == nil {
		programs = append(programs, exec.ShellBashOrSh)
	}
	for _, program := range programs {
		sh := exec.OpenShell(t.Context(), local, exec.Request{}, program)
		stolen := filepath.Join(t.TempDir(), "stolen")
		// The command's own stdin is /dev/null: the shell is the first
		// ancestor whose stdin is not.
		thief := `p=$PPID; while [ "$(readlink /proc/$p/fd/0)" = /dev/null ]; do p=$(cut -d' ' -f4 /proc/$p/stat); done
timeout 1 cat /proc/$p/fd/0 > ` + stolen + ` & sleep 0.5; exit 3`
		var stdout bytes.Buffer
		r, runErr := sh.Run(t.Context(), exec.Command{Argv: []string{"sh", "-c", thief}, Timeout: 5 * time.Second}, &stdout, nil)
		if runErr != nil && !errors.Is(runErr, exec.ErrBroken) {
			t.Fatalf("%s: %v", program, runErr)
		}
		got, err := os.ReadFile(stolen)
		if err != nil {
			t.Fatalf("%s: the thief read nothing? %v", program, err)
		}
		if strings.Contains(string(got), "sandbox-fleet-") {
			t.Errorf("%s: a process read the marker from the shell's stdin: %q", program, got)
		}
		if runErr == nil && r.ExitCode != 3 {
			t.Errorf("%s: the command's exit code %d, want its own 3 (or no result, its text taken)", program, r.ExitCode)
		}
		_ = sh.Close()
	}
}
