package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// process is one component the cluster started, with its output in a log
// file of its own.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	exitErr error         // valid once done is closed
}

// spawnRequests feeds the one goroutine that starts every child. It is
// locked to its OS thread for the life of the test binary because the kernel
// sends Pdeathsig when the *thread* that forked a child exits, not the
// process; a child forked from an ordinary goroutine could be killed when Go
// retires that thread.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd *exec.Cmd
	err chan error
}

func init() {
	go func() {
		runtime.LockOSThread()
		for r := range spawnRequests {
			r.err <- r.cmd.Start()
		}
	}()
}

// startProcess runs bin with args, logging to logDir/name.log. Unless
// detached, the child is killed by the kernel if this process dies without
// stopping it (a panic, a test timeout, SIGKILL), so no test leaves a
// component running. Either way it gets a process group of its own, so
// stopping it also stops anything it started.
func startProcess(name, bin string, args, env []string, logDir string, detached bool) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if detached {
		// A new session also detaches it from the terminal's SIGHUP.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	req := spawnRequest{cmd: cmd, err: make(chan error)}
	spawnRequests <- req
	if err := <-req.err; err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// failure describes an unexpected exit, with the end of the log.
func (p *process) failure() error {
	return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", p.name, p.exitErr, p.logPath, tail(p.logPath, 20))
}

// waitFor polls ready until it succeeds, the process exits, or ctx ends.
func (p *process) waitFor(ctx context.Context, what string, ready func(context.Context) error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if p.exited() {
			return p.failure()
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %s: %w (last error: %v); log: %s", p.name, what, ctx.Err(), last, p.logPath)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM to the process group and SIGKILL after grace.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// The group may outlive its leader; make sure none of it is left.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
