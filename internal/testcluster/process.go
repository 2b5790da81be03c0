package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-fleet/sandbox-fleet/internal/gobuild"
)

// Process is one component the cluster started, or a program a test
// started next to them (StartProcess), with its output in a log file of
// its own.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// args and env (beyond this process's environment) are how it was
	// started, for a detached cluster's supervisor to start it again.
	args, env []string
	done      chan struct{} // closed when the process has exited
	exitErr   error         // valid once done is closed
	// killed marks a process Cluster.Kill stopped for good (guarded by
	// the cluster's mu).
	killed bool
	// start starts the process again as it was started, for Restart.
	start func() (*Process, error)
	// probes are what start-up waited for, in order, for Restart to wait
	// for again.
	probes []probe
}

type probe struct {
	what  string
	ready func(context.Context) error
}

// spawnRequests feeds the one goroutine that starts every child. It is
// locked to its OS thread for the life of the test binary because the kernel
// sends Pdeathsig when the *thread* that forked a child exits, not the
// process; a child forked from an ordinary goroutine could be killed when Go
// retires that thread.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd *exec.Cmd
	// cpus, if any, are the CPUs the child may run on: it inherits the
	// affinity of the thread that forks it.
	cpus []int
	err  chan error
}

func init() {
	go func() {
		runtime.LockOSThread()
		var all unix.CPUSet
		if err := unix.SchedGetaffinity(0, &all); err != nil {
			panic(fmt.Sprintf("reading the spawner thread's CPU affinity: %v", err))
		}
		for r := range spawnRequests {
			r.err <- startOn(r.cmd, r.cpus, &all)
		}
	}()
}

// startOn starts cmd from the calling, locked thread, on cpus if any,
// and then gives the thread back its affinity all.
func startOn(cmd *exec.Cmd, cpus []int, all *unix.CPUSet) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	var set unix.CPUSet
	for _, cpu := range cpus {
		set.Set(cpu)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("running on CPUs %v: %w", cpus, err)
	}
	defer func() { _ = unix.SchedSetaffinity(0, all) }()
	return cmd.Start()
}

// startProcess runs bin with args, logging to logDir/name.log. Unless
// detached, the child is killed by the kernel if this process dies without
// stopping it (a panic, a test timeout, SIGKILL), so no test leaves a
// component running. Either way it gets a process group of its own, so
// stopping it also stops anything it started.
func startProcess(name, bin string, args, env []string, logDir string, detached bool, cpus []int) (*Process, error) {
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
	req := spawnRequest{cmd: cmd, cpus: cpus, err: make(chan error)}
	spawnRequests <- req
	if err := <-req.err; err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, args: args, env: env, done: make(chan struct{}),
		start: func() (*Process, error) { return startProcess(name, bin, args, env, logDir, detached, cpus) }}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's ID, for reading its use of CPU and memory.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error once Done is closed, with the end of its
// log if it failed.
func (p *Process) Err() error {
	if p.exitErr == nil {
		return nil
	}
	return p.failure()
}

// Stop stops the process and its group: SIGTERM, then SIGKILL after 10 s.
func (p *Process) Stop() error { return p.stop(10 * time.Second) }

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// failure describes an unexpected exit, with the end of the log.
func (p *Process) failure() error {
	return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", p.name, p.exitErr, p.logPath, tail(p.logPath, 20))
}

// waitFor polls ready until it succeeds, the process exits, or ctx ends.
func (p *Process) waitFor(ctx context.Context, what string, ready func(context.Context) error) error {
	p.probes = append(p.probes, probe{what, ready})
	return p.poll(ctx, what, ready)
}

func (p *Process) poll(ctx context.Context, what string, ready func(context.Context) error) error {
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
func (p *Process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	// A frozen process (Freeze) must run to hear the SIGTERM.
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
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

// PinThisProcess moves every thread of this process, and so the threads
// they start, to cpus: a benchmark keeps itself apart from what it
// measures, as StartProcess keeps a component on the CPUs it is given.
func PinThisProcess(cpus ...int) error {
	var set unix.CPUSet
	for _, cpu := range cpus {
		set.Set(cpu)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread may end between the listing and here.
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("moving thread %d to CPUs %v: %w", tid, cpus, err)
		}
	}
	return nil
}

// BuildCommand builds the project's command cmd/name into dir and
// returns its path, for tests that run it as users do: as the images ship
// it (gobuild), so what tests and benchmarks run (and measure) is that
// binary.
func BuildCommand(dir, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	if err := gobuild.Command(root, name, bin, gobuild.Target{}); err != nil {
		return "", err
	}
	return bin, nil
}
