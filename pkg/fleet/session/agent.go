package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// What an agent framework does in a sandbox beyond one command at a time:
// shells that keep their state between commands (SWE-agent's and
// OpenHands' bash session), processes it drives while they run, and
// whether the sandbox is still there. They live as long as the lease: a
// release (and so a reset) ends them all.

// Bounds on what one sandbox holds at once.
const (
	MaxShells    = 16
	MaxProcesses = 64
	MaxForwards  = 16
)

// tools are a handle's shells, processes and forwarded ports, and the
// calls running commands in it.
type tools struct {
	mu       sync.Mutex
	shells   map[string]*exec.Shell
	procs    map[string]*exec.Process
	forwards map[string]*exec.Forward
	next     int
	// closed: the handle was released; nothing more is registered, and
	// calls find it gone. calls are the calls in flight (an exec, a shell
	// script, files), each with the cancel that stops it.
	closed   bool
	calls    map[int]context.CancelFunc
	lastCall int
	ended    sync.WaitGroup
	// resumed: the handle was taken over from a driver that died, whose
	// shells and processes died with it. Processes started since have ids
	// of this driver's (prefix), and opened names the shells opened since,
	// so a call naming one of the dead driver's is told it is gone.
	resumed bool
	prefix  string
	opened  map[string]bool
}

// goneWithDriver is the error of a call naming a shell or process the
// dead driver had: the sandbox's failure, not a bad request.
func goneWithDriver(id, what string) error {
	return verdict.Infrastructure(verdict.Exec, fmt.Errorf("sandbox %s: %s ended with the serve that ran it, which stopped "+
		"(the session was resumed by serve --resume); open or start it again", id, what))
}

// errReleased is the error of a call on a handle being released.
func errReleased(id string) error {
	return fmt.Errorf("%w: sandbox %s was released", ErrNotFound, id)
}

// begin registers a call that runs a command in the sandbox: its context,
// which release cancels, and the func that ends it; a released handle
// refuses it.
func (t *tools) begin(ctx context.Context, id string) (context.Context, func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, nil, errReleased(id)
	}
	ctx, cancel := context.WithCancel(ctx)
	if t.calls == nil {
		t.calls = map[int]context.CancelFunc{}
	}
	t.lastCall++
	key := t.lastCall
	t.calls[key] = cancel
	t.ended.Add(1)
	return ctx, func() {
		t.mu.Lock()
		delete(t.calls, key)
		t.mu.Unlock()
		cancel()
		t.ended.Done()
	}, nil
}

// closeAll refuses anything new on the handle, stops the calls in flight
// and waits for them, and ends every shell, process and forward: nothing
// of the lease outlives its release.
func (t *tools) closeAll(ctx context.Context) {
	t.mu.Lock()
	t.closed = true
	shells, procs, forwards := t.shells, t.procs, t.forwards
	t.shells, t.procs, t.forwards = nil, nil, nil
	for _, cancel := range t.calls {
		cancel()
	}
	t.mu.Unlock()
	t.ended.Wait()
	for _, f := range forwards {
		f.Close()
	}
	var wg sync.WaitGroup
	for _, sh := range shells {
		wg.Go(func() { _ = sh.Close() })
	}
	for _, p := range procs {
		wg.Go(func() { p.Stop(ctx) })
	}
	wg.Wait()
}

var shellName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// OpenShell opens shell name in client's sandbox id, in container (the
// sandbox's own when "") — bash where the image has it, else sh — and
// returns once it runs, reporting whether it was new; a shell of that
// name open already is kept as it is, and one open in another container
// is an error.
func (s *Session) OpenShell(ctx context.Context, id, client, name, container string) (bool, error) {
	if !shellName.MatchString(name) {
		return false, fmt.Errorf("%w: shell name %q: use letters, digits, '.', '_' or '-' (at most 63)", ErrInvalid, name)
	}
	h, err := s.Handle(id, client)
	if err != nil {
		return false, err
	}
	t := &h.tools
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false, errReleased(id)
	}
	container = cmp.Or(container, fleet.ContainerName)
	if sh, ok := t.shells[name]; ok {
		if sh.Container() != container {
			return false, fmt.Errorf("%w: shell %s of sandbox %s is open in container %q, not %q: close it first, or name another shell",
				ErrInvalid, name, id, sh.Container(), container)
		}
		return false, nil
	}
	if len(t.shells) >= MaxShells {
		return false, fmt.Errorf("%w: sandbox %s has %d shells open, the most it may: close one first", ErrInvalid, id, MaxShells)
	}
	sh := h.Sandbox.OpenShell(s.ctx, container, exec.ShellBashOrSh)
	if err := sh.Ready(ctx); err != nil {
		_ = sh.Close()
		return false, failed(ctx, h, fmt.Errorf("opening shell %s: %w", name, err))
	}
	if t.shells == nil {
		t.shells = map[string]*exec.Shell{}
	}
	t.shells[name] = sh
	if t.resumed {
		if t.opened == nil {
			t.opened = map[string]bool{}
		}
		t.opened[name] = true
	}
	return true, nil
}

// ShellCommand is a script for a shell.
type ShellCommand struct {
	Script string
	// Timeout bounds the script; 0 is no bound.
	Timeout     time.Duration
	MergeStderr bool
}

// ShellRun runs c in shell name of client's sandbox id, its output copied
// to stdout and stderr as it comes. A script past its timeout is
// interrupted, then killed, and returned TimedOut; the shell stays. A
// script that ends the shell (exit) returns its code and closes the
// shell. An error is the sandbox's failure, or a bad request.
func (s *Session) ShellRun(ctx context.Context, id, client, name string, c ShellCommand, stdout, stderr io.Writer) (ExecResult, error) {
	if c.Timeout < 0 {
		return ExecResult{}, fmt.Errorf("%w: timeout %s: must not be negative", ErrInvalid, c.Timeout)
	}
	h, sh, err := s.shell(id, client, name)
	if err != nil {
		return ExecResult{}, err
	}
	ctx, end, err := h.tools.begin(ctx, id)
	if err != nil {
		return ExecResult{}, err
	}
	defer end()
	s.mu.Lock()
	s.counts.Execs++
	s.mu.Unlock()
	start := time.Now()
	r, err := sh.Run(ctx, exec.Command{Script: c.Script, Timeout: c.Timeout, MergeStderr: c.MergeStderr}, stdout, stderr)
	s.observe(func(m *metrics.Metrics) { m.SessionCommand("shell", err == nil, time.Since(start)) })
	// A caller gone leaves the shell as it was (its command stopped).
	if r.Exited || errors.Is(err, exec.ErrBroken) {
		h.tools.mu.Lock()
		if h.tools.shells[name] == sh {
			delete(h.tools.shells, name)
		}
		h.tools.mu.Unlock()
		_ = sh.Close()
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return ExecResult{}, err
	case err != nil:
		return ExecResult{}, failed(ctx, h, fmt.Errorf("shell %s: %w (open it again)", name, err))
	}
	return ExecResult{ExitCode: r.ExitCode, TimedOut: r.TimedOut}, nil
}

func (s *Session) shell(id, client, name string) (*Handle, *exec.Shell, error) {
	h, err := s.Handle(id, client)
	if err != nil {
		return nil, nil, err
	}
	h.tools.mu.Lock()
	defer h.tools.mu.Unlock()
	sh, ok := h.tools.shells[name]
	if !ok && h.tools.resumed && !h.tools.opened[name] {
		return nil, nil, goneWithDriver(id, fmt.Sprintf("shell %q", name))
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w: sandbox %s has no shell %q open (closed, exited, or never opened): open it first", ErrNotFound, id, name)
	}
	return h, sh, nil
}

// ShellInterrupt sends SIGINT to what shell name runs now, as Ctrl-C
// would; the shell stays.
func (s *Session) ShellInterrupt(ctx context.Context, id, client, name string) error {
	_, sh, err := s.shell(id, client, name)
	if err != nil {
		return err
	}
	return infraOrNil(sh.Interrupt(ctx))
}

// CloseShell ends shell name; closing one that is not open is no error.
func (s *Session) CloseShell(id, client, name string) error {
	h, err := s.Handle(id, client)
	if err != nil {
		return err
	}
	h.tools.mu.Lock()
	sh := h.tools.shells[name]
	delete(h.tools.shells, name)
	h.tools.mu.Unlock()
	if sh != nil {
		return sh.Close()
	}
	return nil
}

// Shells lists the shells open in client's sandbox id.
func (s *Session) Shells(id, client string) ([]string, error) {
	h, err := s.Handle(id, client)
	if err != nil {
		return nil, err
	}
	h.tools.mu.Lock()
	defer h.tools.mu.Unlock()
	return slices.Sorted(maps.Keys(h.tools.shells)), nil
}

// ProcessEvent is a piece of a process's output ("stdout" or "stderr"),
// or its end (End, with its exit code; Err when the end was not seen).
type ProcessEvent = exec.Event

// Start starts r's command (argv, env, cwd, container; no stdin: write it
// with WriteStdin) in client's sandbox id and returns the process's id.
func (s *Session) Start(ctx context.Context, id, client string, r ExecRequest) (string, error) {
	h, err := s.Handle(id, client)
	if err != nil {
		return "", err
	}
	argv, err := command(r.Argv, r.Env, r.Cwd)
	if err != nil {
		return "", err
	}
	t := &h.tools
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", errReleased(id)
	}
	running := 0
	for _, p := range t.procs {
		if !p.Done() {
			running++
		}
	}
	if running >= MaxProcesses {
		return "", fmt.Errorf("%w: sandbox %s runs %d processes, the most it may: wait for or signal one first", ErrInvalid, id, MaxProcesses)
	}
	if t.procs == nil {
		t.procs = map[string]*exec.Process{}
	}
	t.next++
	pid := t.prefix + "p" + strconv.Itoa(t.next)
	t.procs[pid] = h.Sandbox.Start(s.ctx, exec.Request{Command: argv, Container: r.Container})
	s.mu.Lock()
	s.counts.Execs++
	s.mu.Unlock()
	s.observe(func(m *metrics.Metrics) { m.SessionCommand("process", true, 0) })
	return pid, nil
}

func (s *Session) process(id, client, proc string) (*Handle, *exec.Process, error) {
	h, err := s.Handle(id, client)
	if err != nil {
		return nil, nil, err
	}
	h.tools.mu.Lock()
	defer h.tools.mu.Unlock()
	p, ok := h.tools.procs[proc]
	if !ok && h.tools.resumed && !strings.HasPrefix(proc, h.tools.prefix) {
		return nil, nil, goneWithDriver(id, fmt.Sprintf("process %q", proc))
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w: sandbox %s has no process %q", ErrNotFound, id, proc)
	}
	return h, p, nil
}

// ProcessEvents calls fn with process proc's events from the from-th on,
// as they come, until its end or ctx's; it returns the index after the
// last given. An end whose stream broke because the sandbox went is a
// lost sandbox.
func (s *Session) ProcessEvents(ctx context.Context, id, client, proc string, from int, fn func(ProcessEvent) error) (int, error) {
	if from < 0 {
		return 0, fmt.Errorf("%w: event index %d: must not be negative", ErrInvalid, from)
	}
	h, p, err := s.process(id, client, proc)
	if err != nil {
		return 0, err
	}
	return p.Events(ctx, from, func(e ProcessEvent) error {
		if e.End && e.Err != nil {
			return failed(ctx, h, e.Err)
		}
		return fn(e)
	})
}

// WriteStdin writes data to process proc's stdin, and closes it after
// when closeAfter.
func (s *Session) WriteStdin(id, client, proc string, data []byte, closeAfter bool) error {
	_, p, err := s.process(id, client, proc)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		if err := p.WriteStdin(data); err != nil {
			return fmt.Errorf("%w: %w", ErrFailed, err)
		}
	}
	if closeAfter {
		return p.CloseStdin()
	}
	return nil
}

// SignalProcess sends sig (INT, TERM, KILL, HUP, QUIT, USR1, USR2; "SIG"
// optional) to process proc and what it started.
func (s *Session) SignalProcess(ctx context.Context, id, client, proc, sig string) error {
	name, ok := exec.ValidSignal(sig)
	if !ok {
		return fmt.Errorf("%w: signal %q: use one of %v", ErrInvalid, sig, exec.Signals)
	}
	_, p, err := s.process(id, client, proc)
	if err != nil {
		return err
	}
	return infraOrNil(p.Signal(ctx, name))
}

// WaitProcess waits up to timeout for process proc to end; done is false
// when it still runs.
func (s *Session) WaitProcess(ctx context.Context, id, client, proc string, timeout time.Duration) (res ExecResult, done bool, err error) {
	h, p, err := s.process(id, client, proc)
	if err != nil {
		return ExecResult{}, false, err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := p.Wait(wctx)
	switch {
	case err != nil && wctx.Err() != nil && ctx.Err() == nil:
		return ExecResult{}, false, nil
	case err != nil && ctx.Err() != nil:
		return ExecResult{}, false, err
	case err != nil:
		return ExecResult{}, true, failed(ctx, h, err)
	}
	return ExecResult{ExitCode: r.ExitCode}, true, nil
}

// Alive says whether client's sandbox id is up, from the session's watch
// of its Pod (no command is run), and why not when it is not.
func (s *Session) Alive(ctx context.Context, id, client string) (bool, string, error) {
	h, err := s.Handle(id, client)
	if err != nil {
		return false, "", err
	}
	err = h.Sandbox.Alive(ctx)
	var lost *verdict.LostError
	switch {
	case err == nil:
		return true, "", nil
	case errors.As(err, &lost):
		return false, lost.Error(), nil
	default:
		return false, "", infraOrNil(err)
	}
}

// failed is err, the end of a shell's or a process's stream, as the
// infrastructure's verdict: the sandbox lost when its Pod went, else exec.
func failed(ctx context.Context, h *Handle, err error) error {
	var lost *verdict.LostError
	if errors.As(h.Sandbox.Alive(context.WithoutCancel(ctx)), &lost) {
		return infraOf(lost)
	}
	return infraOf(err)
}

func infraOrNil(err error) error {
	if err == nil {
		return nil
	}
	return infraOf(err)
}

// PortForward serves port of client's sandbox id on 127.0.0.1 of the
// session's machine until ClosePortForward or the release, and returns the
// forward's id and its local address.
func (s *Session) PortForward(id, client string, port int) (string, string, error) {
	if port < 1 || port > 65535 {
		return "", "", fmt.Errorf("%w: port %d: give a port from 1 to 65535", ErrInvalid, port)
	}
	h, err := s.Handle(id, client)
	if err != nil {
		return "", "", err
	}
	t := &h.tools
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", "", errReleased(id)
	}
	if len(t.forwards) >= MaxForwards {
		return "", "", fmt.Errorf("%w: sandbox %s has %d ports forwarded, the most it may: close one first", ErrInvalid, id, MaxForwards)
	}
	f, err := h.Sandbox.PortForward(port)
	if err != nil {
		return "", "", infraOf(err)
	}
	if t.forwards == nil {
		t.forwards = map[string]*exec.Forward{}
	}
	t.next++
	fid := "f" + strconv.Itoa(t.next)
	t.forwards[fid] = f
	return fid, f.Address, nil
}

// ClosePortForward stops forward fid and frees its local port; closing one
// closed already is no error.
func (s *Session) ClosePortForward(id, client, fid string) error {
	h, err := s.Handle(id, client)
	if err != nil {
		return err
	}
	h.tools.mu.Lock()
	f := h.tools.forwards[fid]
	delete(h.tools.forwards, fid)
	h.tools.mu.Unlock()
	if f != nil {
		f.Close()
	}
	return nil
}
