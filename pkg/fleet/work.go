package fleet

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/recycle"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/sandbox"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// Sandbox is a claimed sandbox: its handle and the cluster it runs on.
type Sandbox struct {
	*sandbox.Handle
	cluster *Cluster
	image   string
	// baseline is what the sandbox was at its first task, when it is
	// recycled; Resets counts the resets it has had since.
	baseline *recycle.Baseline
	Resets   int
	// session sends commands over one long-lived shell (config session).
	session bool

	shellMu sync.Mutex
	shell   *exec.Shell
	// breaks counts the shells that broke under a command; after two the
	// sandbox runs commands by an exec each and is not recycled.
	breaks int
}

// Exec runs a command in the sandbox's container (the sandbox container
// unless r.Container says otherwise) through the cluster's API server —
// over the sandbox's command session when the run has sessions on. A
// command past r.Timeout is stopped in the sandbox, with what it started,
// and its result is TimedOut with exit code 124: the task's failure, not
// the sandbox's. When the sandbox was lost under the command — its stream
// broke, or it was killed by a signal as its Pod went — the error is a
// *LostError.
func (s *Sandbox) Exec(ctx context.Context, r exec.Request) (exec.Result, error) {
	if s.session && r.Container == "" {
		return s.execInSession(ctx, r)
	}
	return s.exec(ctx, r)
}

// exec runs r by an exec of its own.
func (s *Sandbox) exec(ctx context.Context, r exec.Request) (exec.Result, error) {
	res, err := exec.Bounded(ctx, s.run, r, r.Timeout)
	return s.resultOrLost(ctx, res, err)
}

// resultOrLost is orLost for a result: a command stopped at its timeout
// was killed by the fleet, so only a Pod already gone makes it lost.
func (s *Sandbox) resultOrLost(ctx context.Context, res exec.Result, err error) (exec.Result, error) {
	if res.TimedOut && err == nil {
		var lost *LostError
		if aerr := s.Alive(context.WithoutCancel(ctx)); errors.As(aerr, &lost) {
			return exec.Result{}, lost
		}
		return res, nil
	}
	code, err := s.orLost(ctx, res.ExitCode, err)
	return exec.Result{ExitCode: code}, err
}

// orLost returns a command's code and error, or the sandbox's
// *LostError when the command broke off or died of a signal because
// the sandbox went.
func (s *Sandbox) orLost(ctx context.Context, code int, err error) (int, error) {
	if err != nil || code > 128 {
		if lost := s.lost(context.WithoutCancel(ctx)); lost != nil {
			return 0, lost
		}
	}
	return code, err
}

// ContainerName is the sandbox's own container in its Pod: where a
// command, shell or process runs when no container is named.
const ContainerName = resources.ContainerName

// run runs r by an exec of its own.
func (s *Sandbox) run(ctx context.Context, r exec.Request) (int, error) {
	r.Namespace, r.Pod = s.Namespace, s.Pod
	if r.Container == "" {
		r.Container = resources.ContainerName
	}
	return exec.Run(ctx, s.cluster.Clients.Config, s.cluster.Clients.Kube, r)
}

// execInSession runs r over the sandbox's shell, opening one if there is
// none. A shell that breaks under a command fails that command — it may
// have run in part — and the next command opens another; after a second
// break (not counting commands that ran out of their own time) the
// sandbox goes back to an exec per command and is quarantined when given
// back. Stdin larger than a shell command carries goes by an exec.
func (s *Sandbox) execInSession(ctx context.Context, r exec.Request) (exec.Result, error) {
	var stdin []byte
	if r.Stdin != nil {
		b, err := io.ReadAll(io.LimitReader(r.Stdin, exec.MaxStdin+1))
		if err != nil {
			return exec.Result{}, fmt.Errorf("reading the command's stdin: %w", err)
		}
		if len(b) > exec.MaxStdin {
			r.Stdin = io.MultiReader(bytes.NewReader(b), r.Stdin)
			return s.exec(ctx, r)
		}
		stdin = b
	}
	sh := s.openShell(ctx)
	if sh == nil {
		return s.exec(ctx, r)
	}
	res, err := sh.Run(ctx, exec.Command{Argv: r.Command, Stdin: stdin, Timeout: r.Timeout}, r.Stdout, r.Stderr)
	if err != nil {
		s.shellMu.Lock()
		if s.shell == sh {
			s.shell = nil
			if ctx.Err() == nil {
				s.breaks++
			}
		}
		s.shellMu.Unlock()
		_ = sh.Close()
	}
	return s.resultOrLost(ctx, res, err)
}

// openShell returns the sandbox's shell, opened if need be, or nil once
// two have broken.
func (s *Sandbox) openShell(ctx context.Context) *exec.Shell {
	s.shellMu.Lock()
	defer s.shellMu.Unlock()
	if s.shell == nil && s.breaks < 2 {
		// The shell's own stream needs no lost check: each command's
		// failure makes one.
		s.shell = exec.OpenShell(ctx, s.run, exec.Request{}, exec.ShellSh)
	}
	return s.shell
}

// OpenShell opens a long-lived shell (program: exec.ShellSh or
// exec.ShellBashOrSh) in container (the sandbox's own when ""), apart
// from its command session: its scripts keep the shell's state, and are
// stopped in the sandbox at their timeout or an interrupt.
func (s *Sandbox) OpenShell(ctx context.Context, container, program string) *exec.Shell {
	return exec.OpenShell(ctx, s.run, exec.Request{Container: cmp.Or(container, ContainerName)}, program)
}

// Start starts r's command in the sandbox as a process its caller drives:
// output as it comes, stdin, signals, its end.
func (s *Sandbox) Start(ctx context.Context, r exec.Request) *exec.Process {
	return exec.StartProcess(ctx, s.run, r)
}

// StopStrays stops, with what they started, the commands an earlier
// driver of the sandbox left running in its container (shells, processes,
// execs in flight when it died), and returns how many there were. Call it
// before this process runs anything there: it cannot tell its own apart.
func (s *Sandbox) StopStrays(ctx context.Context) (int, error) {
	return exec.StopStrays(ctx, s.run, resources.ContainerName)
}

// PortForward serves port of the sandbox's Pod on 127.0.0.1 of this
// machine, through the cluster's API server, until the Forward is closed.
func (s *Sandbox) PortForward(port int) (*exec.Forward, error) {
	return exec.PortForward(s.cluster.Clients.Config, s.cluster.Clients.Kube, s.Namespace, s.Pod, port)
}

// closeShell ends the sandbox's shell, if it has one.
func (s *Sandbox) closeShell() {
	s.shellMu.Lock()
	sh := s.shell
	s.shell = nil
	s.shellMu.Unlock()
	if sh != nil {
		_ = sh.Close()
	}
}

// shellBroken reports whether the sandbox's command sessions broke twice.
func (s *Sandbox) shellBroken() bool {
	s.shellMu.Lock()
	defer s.shellMu.Unlock()
	return s.breaks >= 2
}

// lostWait is how long a command that broke off waits to learn whether its
// sandbox was lost: the Pod's deletion, or its container's restart, reaches
// the run's cache a moment after the kubelet killed the command — the
// kubelet notices a dead container on its next relist, each second.
const lostWait = 5 * time.Second

// lost returns the sandbox's *LostError if it is lost within
// lostWait, nil otherwise.
func (s *Sandbox) lost(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, lostWait)
	defer cancel()
	for {
		changed := s.cluster.tracker.Changed()
		var lost *LostError
		if err := s.Alive(ctx); errors.As(err, &lost) {
			return lost
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// Alive returns nil while the sandbox's Pod is up and a *LostError
// once it is gone or going.
func (s *Sandbox) Alive(ctx context.Context) error { return s.cluster.claimer.Alive(ctx, s.Handle) }

// Output is what a task's work produced. TimedOut says the work was
// stopped at the task's timeout (its exit code is then 124).
type Output struct {
	ExitCode int
	TimedOut bool
	// Stdout and Stderr are the ends of the streams, at most TailBytes each.
	Stdout, Stderr string
}

// Work is done in each task's sandbox. An error means the work could not
// run; a command that ran and failed is an Output with a non-zero exit code.
// The task's timeout, when the run has one, is TaskDeadline(ctx): work
// past it is stopped and returned as a TimedOut Output. ctx itself ends a
// little later, for the stopping.
type Work func(ctx context.Context, t tasks.Task, s *Sandbox) (Output, error)

// TailBytes is how much of each output stream a result keeps.
const TailBytes = 4096

// NoWork claims and releases each sandbox and runs nothing in it, to
// measure or exercise the fleet itself (`--process none`).
func NoWork(context.Context, tasks.Task, *Sandbox) (Output, error) { return Output{}, nil }

// ExecWork runs command, its placeholders filled in per task, in each
// sandbox. When script is not empty it is copied into the sandbox and run
// with command as its arguments, so a shebang picks its interpreter.
func ExecWork(command []string, script []byte) Work {
	return func(ctx context.Context, t tasks.Task, s *Sandbox) (Output, error) {
		args, err := Expand(command, t, s.Handle)
		if err != nil {
			return Output{}, err
		}
		var stdin io.Reader
		if script != nil {
			// The script arrives on stdin, is written to a temporary file
			// and run from there; the task id and image are exported.
			args = append([]string{"sh", "-c", scriptRunner, "sandbox-fleet", t.ID, t.Image}, args...)
			stdin = bytes.NewReader(script)
		}
		stdout, stderr := newTail(TailBytes), newTail(TailBytes)
		var timeout time.Duration
		if deadline, ok := TaskDeadline(ctx); ok {
			timeout = max(time.Until(deadline), time.Millisecond)
		}
		res, err := s.Exec(ctx, exec.Request{Command: args, Stdin: stdin, Stdout: stdout, Stderr: stderr, Timeout: timeout})
		return Output{ExitCode: res.ExitCode, TimedOut: res.TimedOut, Stdout: stdout.String(), Stderr: stderr.String()}, err
	}
}

const scriptRunner = `export SANDBOX_FLEET_TASK_ID="$1" SANDBOX_FLEET_IMAGE="$2"; shift 2
f=$(mktemp) && cat >"$f" && chmod +x "$f" || exit 126
"$f" "$@"; rc=$?; rm -f "$f"; exit $rc`

// LocalWork runs command, its placeholders filled in, on this machine once
// per task, with the sandbox's handle in its environment (SANDBOX_FLEET_*
// variables and SANDBOX_FLEET_HANDLE as JSON), for agents that drive the
// sandbox themselves.
func LocalWork(command []string) Work {
	return func(ctx context.Context, t tasks.Task, s *Sandbox) (Output, error) {
		args, err := Expand(command, t, s.Handle)
		if err != nil {
			return Output{}, err
		}
		handle, err := json.Marshal(s.Handle)
		if err != nil {
			return Output{}, err
		}
		cctx := ctx
		if deadline, ok := TaskDeadline(ctx); ok {
			var cancel context.CancelFunc
			cctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		cmd := osexec.CommandContext(cctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(),
			"SANDBOX_FLEET_HANDLE="+string(handle),
			"SANDBOX_FLEET_TASK_ID="+t.ID,
			"SANDBOX_FLEET_IMAGE="+t.Image,
			"SANDBOX_FLEET_CLUSTER="+s.Cluster,
			"SANDBOX_FLEET_NAMESPACE="+s.Namespace,
			"SANDBOX_FLEET_POD="+s.Pod,
			"SANDBOX_FLEET_POD_IP="+s.PodIP,
			"SANDBOX_FLEET_SANDBOX="+s.Sandbox,
			"SANDBOX_FLEET_HOSTNAME="+s.Hostname,
			"SANDBOX_FLEET_CLAIM="+s.Claim,
			"SANDBOX_FLEET_NODE="+s.Node,
			"SANDBOX_FLEET_CONTAINER="+resources.ContainerName,
		)
		stdout, stderr := newTail(TailBytes), newTail(TailBytes)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// Ctrl-C or the task timeout ends the command and everything it
		// started (an agent's own children), and a grandchild that keeps
		// the output open cannot hold the task past localWaitDelay.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = localWaitDelay
		err = cmd.Run()
		out := Output{Stdout: stdout.String(), Stderr: stderr.String()}
		if cctx.Err() != nil && ctx.Err() == nil {
			// The task's own timeout, not the run's end.
			out.ExitCode, out.TimedOut = exec.TimeoutExitCode, true
			return out, nil
		}
		var exitErr *osexec.ExitError
		if errors.As(err, &exitErr) && exitErr.ExitCode() >= 0 {
			out.ExitCode = exitErr.ExitCode()
			return out, nil
		}
		return out, err
	}
}

// localWaitDelay bounds how long a local command's output is read after it
// was killed or exited.
const localWaitDelay = 5 * time.Second

// taskDeadlineKey carries a task's deadline to its work.
type taskDeadlineKey struct{}

// withTaskDeadline gives work under ctx the task deadline d.
func withTaskDeadline(ctx context.Context, d time.Time) context.Context {
	return context.WithValue(ctx, taskDeadlineKey{}, d)
}

// TaskDeadline is when the task's own time runs out, if it has a timeout:
// work past it is the task's failure (timed out), not the sandbox's.
func TaskDeadline(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Value(taskDeadlineKey{}).(time.Time)
	return d, ok
}

// stopGrace is how long work has past its task's deadline to be stopped
// and return, before its context ends.
const stopGrace = 10 * time.Second

var placeholder = regexp.MustCompile(`\{([a-zA-Z_.][a-zA-Z0-9_.\-]*)\}`)

// Placeholders are the names {name} can stand for in a command.
var Placeholders = []string{"id", "image", "original_image", "cluster", "namespace", "hostname", "pod", "pod_ip", "sandbox", "claim", "node", "metadata.KEY"}

// Expand fills in the {placeholders} of command for task t in sandbox h. A
// nil h checks the placeholders without a sandbox. An unknown placeholder,
// or a metadata key t lacks, is an error naming the task's file and line.
func Expand(command []string, t tasks.Task, h *sandbox.Handle) ([]string, error) {
	if h == nil {
		h = &sandbox.Handle{}
	}
	values := map[string]string{
		"id": t.ID, "image": t.Image, "original_image": cmp.Or(t.OriginalImage, t.Image), "cluster": h.Cluster,
		"namespace": h.Namespace, "hostname": h.Hostname, "pod": h.Pod, "pod_ip": h.PodIP, "sandbox": h.Sandbox, "claim": h.Claim, "node": h.Node,
	}
	out := make([]string, len(command))
	var bad []string
	for i, arg := range command {
		out[i] = placeholder.ReplaceAllStringFunc(arg, func(m string) string {
			name := m[1 : len(m)-1]
			if v, ok := values[name]; ok {
				return v
			}
			if key, ok := strings.CutPrefix(name, "metadata."); ok {
				if v, ok := t.Metadata[key]; ok {
					if s, ok := v.(string); ok {
						return s
					}
					b, _ := json.Marshal(v)
					return string(b)
				}
				bad = append(bad, fmt.Sprintf("task %s has no metadata field %q", t.ID, key))
				return m
			}
			bad = append(bad, fmt.Sprintf("unknown placeholder %s: use %s", m, "{"+strings.Join(Placeholders, "}, {")+"}"))
			return m
		})
	}
	if len(bad) > 0 {
		where := t.Source
		if where == "" {
			where = "task " + t.ID
		}
		return nil, fmt.Errorf("%s: %s", where, strings.Join(bad, "; "))
	}
	return out, nil
}

// tail keeps the last n bytes written to it.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
	cut bool
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…" + string(t.buf)
	}
	return string(t.buf)
}
