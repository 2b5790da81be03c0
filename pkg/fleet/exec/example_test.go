package exec_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
)

// runHere is a Runner over this machine's processes, standing in for a
// sandbox's: each command in a process group of its own, as runc makes an
// exec's process a session leader.
func runHere(ctx context.Context, r exec.Request) (int, error) {
	cmd := osexec.CommandContext(ctx, r.Command[0], r.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.Stdin, r.Stdout, r.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var exit *osexec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// A shell keeps its state from one script to the next, as an agent
// framework's session does; a script past its timeout is stopped and the
// shell goes on.
func ExampleOpenShell() {
	ctx := context.Background()
	sh := exec.OpenShell(ctx, runHere, exec.Request{}, exec.ShellSh)
	defer sh.Close()
	var out strings.Builder
	_, _ = sh.Run(ctx, exec.Command{Script: "cd / && answer=42"}, &out, os.Stderr)
	res, _ := sh.Run(ctx, exec.Command{Script: "echo $answer in $PWD"}, &out, os.Stderr)
	fmt.Print(out.String())
	fmt.Println("exit", res.ExitCode)
	res, _ = sh.Run(ctx, exec.Command{Script: "sleep 30", Timeout: 200 * time.Millisecond}, &out, os.Stderr)
	fmt.Println("timed out", res.TimedOut, "exit", res.ExitCode)
	out.Reset()
	_, _ = sh.Run(ctx, exec.Command{Script: "echo $answer"}, &out, os.Stderr)
	fmt.Print(out.String())
	// Output:
	// 42 in /
	// exit 0
	// timed out true exit 124
	// 42
}

// Bounded stops a command at its timeout, with what it started in the
// background, and says so: exit code 124 as timeout(1) gives.
func ExampleBounded() {
	var out strings.Builder
	res, err := exec.Bounded(context.Background(), runHere,
		exec.Request{Command: []string{"sh", "-c", "echo started; sleep 30 & wait"}, Stdout: &out}, 200*time.Millisecond)
	fmt.Print(out.String())
	fmt.Println(res.TimedOut, res.ExitCode, err)
	// Output:
	// started
	// true 124 <nil>
}
