package exec

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Shell is one long-lived shell in a sandbox, over a single exec stream,
// that runs commands one after another: an agent loop of hundreds of small
// commands pays one exec's connection, not one per command.
//
// A command is either argv, run in a subshell of its own so that one
// command's cd, variables or exit do not reach the next (its stdout,
// stderr and exit code are exactly what it would give on an exec of its
// own), or a script evaluated by the shell itself, so that cd, export,
// source and functions carry over to the next script, as in the bash
// session that SWE-agent and OpenHands keep.
//
// Framing: after each command the shell writes, on stdout and on stderr, a
// newline and a marker made of random bytes drawn for that command alone,
// and on stdout its exit code. Output up to the marker is the command's;
// the newline is the shell's, so output without a trailing newline comes
// back as it was. A command cannot forge the marker: the shell takes it
// into a variable of its own before the command starts, the command's
// subshell drops it, and what is left of the command's text on the
// shell's stdin while it runs — which a process in the sandbox can read
// through /proc/<shell>/fd/0 — names the variable, not the marker. Its
// stdin is the bytes it was given, or none.
//
// A command past its timeout, or interrupted, is signalled in the sandbox:
// every process under the shell, leaving the shell itself (SIGINT, then
// SIGKILL). A Shell whose stream broke, or whose command could not be
// stopped, is broken (ErrBroken) and takes no more: open another.
type Shell struct {
	mu     sync.Mutex
	stdin  io.WriteCloser
	stdout *framed
	stderr *framed
	stop   func() error
	broken error
	// signal sends a signal to the processes under the shell.
	signal func(ctx context.Context, sig string, pid int) error
	// pid is the shell's in the sandbox, read from its first line.
	pid int
	// container is the one the shell runs in ("" the Pod's default).
	container string

	// runMu guards running, which Interrupt reads while Run holds mu.
	runMu   sync.Mutex
	running bool
}

// ErrBroken is the error of a command on a Shell that can no longer run
// commands.
var ErrBroken = errors.New("the shell session is broken")

// MaxStdin bounds the stdin a command on a Shell is given: it travels in
// the command's text, as octal escapes.
const MaxStdin = 1 << 20

// Programs a Shell can run: sh, or bash where the image has it (what the
// agent frameworks' sessions run), else sh.
const (
	ShellSh       = "exec sh"
	ShellBashOrSh = "command -v bash >/dev/null && exec bash; exec sh"
)

// Grace periods of a command being stopped: after SIGINT it has
// interruptGrace to end before SIGKILL; after SIGKILL, killGrace before
// the shell itself is given up.
const (
	interruptGrace = time.Second
	killGrace      = 2 * time.Second
)

// OpenShell starts program (ShellSh or ShellBashOrSh) through run (Run, or
// a sandbox's Exec) in the Pod and container of r — its Command and
// streams are the Shell's — and returns the Shell. Its commands are
// signalled by commands run the same way. Close ends it.
func OpenShell(ctx context.Context, run Runner, r Request, program string) *Shell {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	// The commands' stderr goes out on fd 3; the shell's own words
	// ("Killed" after a command died of a signal, which an exec of its own
	// would not say) go to /dev/null. The first line is the shell's PID.
	r.Command, r.Stdin, r.Stdout, r.Stderr = []string{"sh", "-c", "exec 3>&2 2>/dev/null; echo $$; " + program}, inR, outW, errW
	go func() {
		code, err := run(ctx, r)
		if err == nil {
			err = &exitedError{code}
		}
		outW.CloseWithError(err)
		errW.CloseWithError(err)
		inR.CloseWithError(err)
		done <- err
	}()
	stop := func() error {
		// EOF on its stdin ends the shell, and the stream with it, as the
		// server closes it; what the shell still writes is dropped. Cutting
		// the connection instead would make the client log its copiers'
		// errors. A shell still running a command is cut after a grace.
		_ = inW.Close()
		go func() { _, _ = io.Copy(io.Discard, outR) }()
		go func() { _, _ = io.Copy(io.Discard, errR) }()
		select {
		case <-done:
		case <-time.After(shellExitGrace):
			cancel()
			<-done
		}
		cancel()
		return nil
	}
	return &Shell{stdin: inW, stdout: &framed{r: outR}, stderr: &framed{r: errR}, stop: sync.OnceValue(stop), container: r.Container,
		signal: func(ctx context.Context, sig string, pid int) error {
			return Signal(ctx, run, r.Container, sig, pid, Children)
		}}
}

// Container is the container the shell runs in, as it was opened.
func (s *Shell) Container() string { return s.container }

// exitedError is the end of a shell that exited by itself.
type exitedError struct{ code int }

func (e *exitedError) Error() string { return fmt.Sprintf("the shell exited %d", e.code) }

// shellExitGrace is how long a closed Shell's shell has to exit.
const shellExitGrace = 2 * time.Second

// Command is one command of a Shell: Argv, run in a subshell, or Script,
// evaluated by the shell itself.
type Command struct {
	Argv   []string
	Script string
	// Stdin is the command's input; none when empty. Only argv takes it.
	Stdin []byte
	// MergeStderr sends the command's stderr to its stdout, interleaved as
	// written.
	MergeStderr bool
	// Timeout bounds the command; 0 is no bound.
	Timeout time.Duration
}

// Result is what a command did. A command stopped at its timeout has
// TimedOut and exit code 124, as timeout(1) gives. Exited says the shell
// ended with the command (a script that ran exit): it takes no more.
type Result struct {
	ExitCode int
	TimedOut bool
	Exited   bool
}

// TimeoutExitCode is the exit code of a command stopped at its timeout.
const TimeoutExitCode = 124

// Run runs c in the shell and copies its output to stdout and stderr (nil:
// discarded) as it comes. An error means the command's end was not seen,
// and the Shell is broken. When ctx ends the command is stopped as at a
// timeout and ctx's error returned.
func (s *Shell) Run(ctx context.Context, c Command, stdout, stderr io.Writer) (Result, error) {
	if len(c.Argv) == 0 && strings.TrimSpace(c.Script) == "" {
		return Result{}, errors.New("no command: argv and script are empty")
	}
	if c.Script != "" && len(c.Stdin) > 0 {
		// Piped in, the script would run in the pipe's subshell and keep
		// nothing it set.
		return Result{}, errors.New("a script run in the shell takes no stdin: write the input to a file, or run argv")
	}
	if len(c.Stdin) > MaxStdin {
		return Result{}, fmt.Errorf("%d bytes of stdin are more than a shell session carries (%d); write them to a file first", len(c.Stdin), MaxStdin)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrBroken, s.broken)
	}
	if err := s.start(); err != nil {
		return Result{}, s.breakWith(err)
	}
	marker, err := newMarker()
	if err != nil {
		return Result{}, err
	}
	results := make(chan exchanged, 1)
	s.setRunning(true)
	defer s.setRunning(false)
	if c.MergeStderr {
		// The shell sends the command's stderr to stdout; nothing but the
		// marker comes on stderr.
		stderr = nil
	}
	go func() {
		code, err := s.exchange(script(c, marker), marker, stdout, stderr)
		results <- exchanged{code, err}
	}()
	var timeout <-chan time.Time
	if c.Timeout > 0 {
		t := time.NewTimer(c.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var r exchanged
	stopped, timedOut := true, false
	select {
	case r = <-results:
	case <-timeout:
		timedOut = true
		r, stopped = s.stopCommand(ctx, results)
	case <-ctx.Done():
		if r, stopped = s.stopCommand(ctx, results); stopped && r.err == nil {
			return Result{}, context.Cause(ctx)
		}
	}
	var exited *exitedError
	switch {
	case !stopped:
		return Result{}, s.breakWith(fmt.Errorf("the command could not be stopped (a loop of the shell's builtins?), so the shell went with it: %w", r.err))
	case r.err != nil && c.Script != "" && errors.As(r.err, &exited):
		// The script ended the shell (exit, exec, a signal to it).
		s.broken = r.err
		return Result{ExitCode: exited.code, Exited: true}, nil
	case r.err != nil:
		return Result{}, s.breakWith(r.err)
	case timedOut:
		return Result{ExitCode: TimeoutExitCode, TimedOut: true}, nil
	}
	return Result{ExitCode: r.code}, nil
}

// exchanged is how a command's exchange with the shell ended.
type exchanged struct {
	code int
	err  error
}

// stopCommand stops the command running: SIGINT to what runs under the
// shell, then SIGKILL; it returns the command's end as it was seen, and
// false when neither stopped it and the shell was ended instead.
func (s *Shell) stopCommand(ctx context.Context, results <-chan exchanged) (exchanged, bool) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, step := range []struct {
		sig   string
		grace time.Duration
	}{{"INT", interruptGrace}, {"KILL", killGrace}} {
		if err := s.signal(sctx, step.sig, s.pid); err != nil {
			break
		}
		select {
		case r := <-results:
			return r, true
		case <-time.After(step.grace):
		}
	}
	// Nothing stopped it (a loop of the shell's own builtins, or a signal
	// that did not get through): the shell goes with it.
	_ = s.stop()
	return <-results, false
}

// Interrupt sends SIGINT to the command running, as Ctrl-C would: it
// decides how to end (most exit 130), and the shell stays. Nothing
// running is nothing to do.
func (s *Shell) Interrupt(ctx context.Context) error {
	s.runMu.Lock()
	running := s.running
	s.runMu.Unlock()
	if !running {
		return nil
	}
	return s.signal(ctx, "INT", s.pid)
}

func (s *Shell) setRunning(v bool) {
	s.runMu.Lock()
	s.running = v
	s.runMu.Unlock()
}

// Ready waits until the shell runs in the sandbox (its first line came),
// so that a shell that cannot start fails here and the first command does
// not pay for the start; an error breaks the Shell.
func (s *Shell) Ready(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return fmt.Errorf("%w: %w", ErrBroken, s.broken)
	}
	started := make(chan error, 1)
	go func() { started <- s.start() }()
	select {
	case err := <-started:
		if err != nil {
			return s.breakWith(err)
		}
		return nil
	case <-ctx.Done():
		_ = s.stop()
		<-started
		return s.breakWith(context.Cause(ctx))
	}
}

// start reads the shell's PID, its first line, once.
func (s *Shell) start() error {
	if s.pid != 0 {
		return nil
	}
	line, err := s.stdout.line()
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(string(line))
	if err != nil || pid <= 0 {
		return fmt.Errorf("the shell began with %q, not its PID", line)
	}
	s.pid = pid
	return nil
}

func (s *Shell) breakWith(err error) error {
	s.broken = err
	return fmt.Errorf("%w: %w", ErrBroken, err)
}

// exchange sends one command and reads its output up to its markers.
func (s *Shell) exchange(text string, marker []byte, stdout, stderr io.Writer) (int, error) {
	if _, err := io.WriteString(s.stdin, text); err != nil {
		return 0, fmt.Errorf("sending the command: %w", err)
	}
	var errs [2]error
	var tail []byte
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[1] = s.stderr.until(marker, orDiscard(stderr)) })
	tail, errs[0] = s.stdout.until(marker, orDiscard(stdout))
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return 0, err
	}
	code, err := strconv.Atoi(string(tail))
	if err != nil || code < 0 || code > 255 {
		return 0, fmt.Errorf("the shell reported exit code %q", tail)
	}
	return code, nil
}

// Close ends the shell.
func (s *Shell) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == nil {
		s.broken = errors.New("closed")
	}
	_ = s.stdin.Close()
	return s.stop()
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func newMarker() ([]byte, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return []byte("sandbox-fleet-" + hex.EncodeToString(b)), nil
}

// script is the shell text that runs c and then writes the markers:
// "\n<marker> <code>\n" on stdout and "\n<marker>\n" on stderr. Argv runs
// in a subshell; a script is evaluated by the shell itself, so what it
// sets stays (a syntax error in it is its own exit code, not the shell's
// end).
func script(c Command, marker []byte) string {
	var b strings.Builder
	// The marker is read, with this line, before the command starts.
	fmt.Fprintf(&b, "%s=%s\n", markerVar, marker)
	if len(c.Stdin) > 0 {
		// printf's format turns octal escapes back into the bytes.
		b.WriteString("printf '")
		for _, ch := range c.Stdin {
			fmt.Fprintf(&b, "\\%03o", ch)
		}
		b.WriteString("' | ")
	}
	if len(c.Argv) > 0 {
		words := make([]string, len(c.Argv))
		for i, a := range c.Argv {
			words[i] = Quote(a)
		}
		b.WriteString("(unset " + markerVar + "; " + strings.Join(words, " ") + ")")
	} else {
		// Through command, a syntax error in the script is eval's failure
		// (exit 2), not the end of the shell as POSIX has it for a special
		// builtin.
		b.WriteString("command eval " + Quote(c.Script))
	}
	if c.MergeStderr {
		b.WriteString(" 2>&1 3>&-")
	} else {
		b.WriteString(" 2>&3 3>&-")
	}
	if len(c.Stdin) == 0 {
		b.WriteString(" </dev/null")
	}
	fmt.Fprintf(&b, "\nprintf '\\n%%s %%d\\n' \"$%[1]s\" \"$?\"; printf '\\n%%s\\n' \"$%[1]s\" >&3; unset %[1]s\n", markerVar)
	return b.String()
}

// markerVar holds a command's marker in the shell while it runs.
const markerVar = "__sandbox_fleet_marker"

// framed reads a stream of framed outputs.
type framed struct {
	r   io.Reader
	buf []byte
}

// line reads one line.
func (f *framed) line() ([]byte, error) {
	chunk := make([]byte, 512)
	for {
		if i := bytes.IndexByte(f.buf, '\n'); i >= 0 {
			l := append([]byte(nil), f.buf[:i]...)
			f.buf = append(f.buf[:0], f.buf[i+1:]...)
			return l, nil
		}
		n, err := f.r.Read(chunk)
		f.buf = append(f.buf, chunk[:n]...)
		if err != nil && n == 0 {
			return nil, fmt.Errorf("reading the shell's output: %w", err)
		}
	}
}

// until copies what comes before "\n"+marker to w and returns what
// follows the marker on its line, less the space before it.
func (f *framed) until(marker []byte, w io.Writer) ([]byte, error) {
	sep := append([]byte{'\n'}, marker...)
	chunk := make([]byte, 32<<10)
	for {
		if i := bytes.Index(f.buf, sep); i >= 0 {
			if _, err := w.Write(f.buf[:i]); err != nil {
				return nil, err
			}
			rest := f.buf[i+len(sep):]
			if j := bytes.IndexByte(rest, '\n'); j >= 0 {
				tail := bytes.TrimPrefix(rest[:j], []byte{' '})
				f.buf = append(f.buf[:0], rest[j+1:]...)
				return tail, nil
			}
		} else if keep := len(sep) - 1; len(f.buf) > keep {
			// Everything but what could be the start of the marker is
			// the command's.
			n := len(f.buf) - keep
			if _, err := w.Write(f.buf[:n]); err != nil {
				return nil, err
			}
			f.buf = append(f.buf[:0], f.buf[n:]...)
		}
		n, err := f.r.Read(chunk)
		f.buf = append(f.buf, chunk[:n]...)
		if err != nil && n == 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("reading the shell's output: %w", err)
		}
	}
}

// Quote makes s one word of a POSIX shell's command line.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
