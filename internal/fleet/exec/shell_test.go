package exec_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	osexec "os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/exec"
)

// localShell is a Shell over sh on this machine, run with the Request's
// streams as an exec would: the framing is the shell's and the Shell's,
// whatever carries the streams.
func localShell(t *testing.T) *exec.Shell {
	t.Helper()
	local := func(ctx context.Context, r exec.Request) (int, error) {
		cmd := osexec.CommandContext(ctx, r.Command[0], r.Command[1:]...)
		cmd.Stdout, cmd.Stderr = r.Stdout, r.Stderr
		// The shell and what it started go together, as a container's
		// processes go with its exec; stdin is copied apart, as an exec
		// stream does, so that the end of the shell is not held by it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		go func() {
			_, _ = io.Copy(stdin, r.Stdin)
			stdin.Close()
		}()
		err = cmd.Wait()
		var exit *osexec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), nil
		}
		return 0, err
	}
	sh := exec.OpenShell(t.Context(), local, exec.Request{})
	t.Cleanup(func() { _ = sh.Close() })
	return sh
}

func run(t *testing.T, sh *exec.Shell, stdin []byte, argv ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code, err := sh.Run(t.Context(), argv, stdin, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	return stdout.String(), stderr.String(), code
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

// A command that outlives its context breaks the Shell, which then says
// so for every later command.
func TestShellBrokenByATimeout(t *testing.T) {
	sh := localShell(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := sh.Run(ctx, []string{"sleep", "30"}, nil, nil, nil); !errors.Is(err, exec.ErrBroken) {
		t.Fatalf("Run past its deadline = %v, want ErrBroken", err)
	}
	if _, err := sh.Run(t.Context(), []string{"true"}, nil, nil, nil); !errors.Is(err, exec.ErrBroken) {
		t.Errorf("Run on a broken shell = %v, want ErrBroken", err)
	}
}

// A shell that dies (here with its process group, as a container's
// processes do) breaks the Shell.
func TestShellBrokenWhenTheShellExits(t *testing.T) {
	sh := localShell(t)
	if _, err := sh.Run(t.Context(), []string{"sh", "-c", "kill -9 0"}, nil, nil, nil); !errors.Is(err, exec.ErrBroken) {
		t.Errorf("Run as the shell was killed = %v, want ErrBroken", err)
	}
}
