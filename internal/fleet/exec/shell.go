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
// commands pays one exec's connection, not one per command. Each command
// runs in a subshell of its own, so one command's cd, variables or exit do
// not reach the next; its stdout, stderr and exit code are exactly what it
// would give on an exec of its own.
//
// Framing: after each command the shell writes, on stdout and on stderr, a
// newline and a marker made of random bytes drawn for that command alone,
// and on stdout its exit code. Output up to the marker is the command's;
// the newline is the shell's, so output without a trailing newline comes
// back as it was. A command cannot forge the marker: it never sees it
// before it has exited. Its stdin is the bytes it was given, or none.
//
// A Shell whose stream broke, or whose command outlived its context, is
// broken (ErrBroken): its shell may still be running that command, so it
// takes no more. Open another.
type Shell struct {
	mu     sync.Mutex
	stdin  io.WriteCloser
	stdout *framed
	stderr *framed
	stop   func() error
	broken error
}

// ErrBroken is the error of a command on a Shell that can no longer run
// commands.
var ErrBroken = errors.New("the shell session is broken")

// MaxStdin bounds the stdin a command on a Shell is given: it travels in
// the command's text, as octal escapes.
const MaxStdin = 1 << 20

// OpenShell starts sh through run (Run, or a sandbox's Exec) in the Pod
// and container of r — its Command and streams are the Shell's — and
// returns the Shell. Close ends it.
func OpenShell(ctx context.Context, run func(context.Context, Request) (int, error), r Request) *Shell {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	// The commands' stderr goes out on fd 3; the shell's own words
	// ("Killed" after a command died of a signal, which an exec of its own
	// would not say) go to /dev/null.
	r.Command, r.Stdin, r.Stdout, r.Stderr = []string{"sh", "-c", "exec 3>&2 2>/dev/null; exec sh"}, inR, outW, errW
	go func() {
		code, err := run(ctx, r)
		if err == nil {
			err = fmt.Errorf("the shell exited %d", code)
		}
		outW.CloseWithError(err)
		errW.CloseWithError(err)
		inR.CloseWithError(err)
		done <- err
	}()
	return newShell(inW, outR, errR, func() error {
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
	})
}

// shellExitGrace is how long a closed Shell's shell has to exit.
const shellExitGrace = 2 * time.Second

// newShell runs a Shell over a shell's stdin, stdout and stderr; stop ends
// the shell and waits for it. Shell calls stop once.
func newShell(stdin io.WriteCloser, stdout, stderr io.Reader, stop func() error) *Shell {
	return &Shell{stdin: stdin, stdout: &framed{r: stdout}, stderr: &framed{r: stderr}, stop: sync.OnceValue(stop)}
}

// Run runs argv in the shell with stdin (nil: none) and copies its output
// to stdout and stderr (nil: discarded). It returns the exit code; an
// error means the command's end was not seen, and the Shell is broken.
func (s *Shell) Run(ctx context.Context, argv []string, stdin []byte, stdout, stderr io.Writer) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("no command: argv is empty")
	}
	if len(stdin) > MaxStdin {
		return 0, fmt.Errorf("%d bytes of stdin are more than a shell session carries (%d); write them to a file first", len(stdin), MaxStdin)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return 0, fmt.Errorf("%w: %w", ErrBroken, s.broken)
	}
	marker, err := newMarker()
	if err != nil {
		return 0, err
	}
	type result struct {
		code int
		err  error
	}
	results := make(chan result, 1)
	go func() {
		code, err := s.exchange(script(argv, stdin, marker), marker, stdout, stderr)
		results <- result{code, err}
	}()
	select {
	case r := <-results:
		if r.err != nil {
			s.broken = r.err
			return 0, fmt.Errorf("%w: %w", ErrBroken, r.err)
		}
		return r.code, nil
	case <-ctx.Done():
		s.broken = fmt.Errorf("a command outlived its context: %w", context.Cause(ctx))
		// Unblock the exchange: the stream goes with the shell.
		_ = s.stop()
		<-results
		return 0, fmt.Errorf("%w: %w", ErrBroken, s.broken)
	}
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

// script is the shell text that runs argv in a subshell with stdin and
// then writes the markers: "\n<marker> <code>\n" on stdout and
// "\n<marker>\n" on stderr.
func script(argv []string, stdin []byte, marker []byte) string {
	var b strings.Builder
	if len(stdin) > 0 {
		// printf's format turns octal escapes back into the bytes.
		b.WriteString("printf '")
		for _, c := range stdin {
			fmt.Fprintf(&b, "\\%03o", c)
		}
		b.WriteString("' | ")
	}
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = Quote(a)
	}
	b.WriteString("(" + strings.Join(words, " ") + ") 2>&3 3>&-")
	if len(stdin) == 0 {
		b.WriteString(" </dev/null")
	}
	fmt.Fprintf(&b, "\nprintf '\\n%s %%d\\n' \"$?\"; printf '\\n%s\\n' >&3\n", marker, marker)
	return b.String()
}

// framed reads a stream of framed outputs.
type framed struct {
	r   io.Reader
	buf []byte
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
