package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// ExecRequest is a command to run in a sandbox.
type ExecRequest struct {
	Argv []string
	// Stdin, when set, is the command's input; it sees EOF after it.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Timeout bounds the command; 0 is no bound.
	Timeout   time.Duration
	Container string
	Env       map[string]string
	Cwd       string
}

// ExecResult is what a command did: its exit code, and whether it was
// stopped at its timeout (exit code 124 then, as timeout(1) gives).
type ExecResult struct {
	ExitCode int
	TimedOut bool
}

// Exec runs r in client's sandbox id. A command that ran and failed is an
// exit code, and one past its timeout is stopped in the sandbox with what
// it started and returned TimedOut — both the task's doing. An error is an
// infrastructure failure (the sandbox was lost, the command could not run)
// or a bad request.
func (s *Session) Exec(ctx context.Context, id, client string, r ExecRequest) (ExecResult, error) {
	h, err := s.Handle(id, client)
	if err != nil {
		return ExecResult{}, err
	}
	argv, err := command(r.Argv, r.Env, r.Cwd)
	if err != nil {
		return ExecResult{}, err
	}
	if r.Timeout < 0 {
		return ExecResult{}, fmt.Errorf("%w: timeout %s: must not be negative", ErrInvalid, r.Timeout)
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
	res, err := h.Exec(ctx, exec.Request{Command: argv, Container: r.Container, Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Timeout: r.Timeout})
	s.observe(func(m *metrics.Metrics) { m.SessionCommand("exec", err == nil, time.Since(start)) })
	if err != nil {
		return ExecResult{}, infraOf(err)
	}
	return ExecResult{ExitCode: res.ExitCode, TimedOut: res.TimedOut}, nil
}

// infraOf is a sandbox's failure to run a command as the infrastructure's
// verdict: lost, or exec.
func infraOf(err error) error {
	var lost *verdict.LostError
	if errors.As(err, &lost) {
		return verdict.Infrastructure(verdict.Lost, err)
	}
	return verdict.Infrastructure(verdict.Exec, err)
}

// command is argv run with env set and in cwd. The exec API has neither,
// so a shell in the sandbox sets them; argv runs as given otherwise.
func command(argv []string, env map[string]string, cwd string) ([]string, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: no command: argv is empty", ErrInvalid)
	}
	var assign []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("%w: environment variable name %q: it must be non-empty without '=' or NUL", ErrInvalid, k)
		}
		assign = append(assign, k+"="+env[k])
	}
	switch {
	case cwd != "":
		return append([]string{"sh", "-c", `cd "$1" || exit 126; shift; exec env "$@"`, "sh", cwd}, append(assign, argv...)...), nil
	case len(assign) > 0:
		return append(append([]string{"env"}, assign...), argv...), nil
	default:
		return argv, nil
	}
}

// WriteFiles unpacks the tar archive read from archive into dir (made if
// missing) in client's sandbox id with the sandbox's tar, and returns the
// archive's size.
func (s *Session) WriteFiles(ctx context.Context, id, client, dir string, archive io.Reader) (int64, error) {
	if !strings.HasPrefix(dir, "/") {
		return 0, fmt.Errorf("%w: directory %q: give an absolute path", ErrInvalid, dir)
	}
	counted := &counter{r: archive}
	err := s.tar(ctx, id, client, []string{"sh", "-c", `mkdir -p -- "$1" && exec tar -x -f - -C "$1"`, "sh", dir}, counted, io.Discard)
	return counted.n, err
}

// ReadFiles writes a tar archive of paths (files or directories; relative
// ones are under /) in client's sandbox id to w.
func (s *Session) ReadFiles(ctx context.Context, id, client string, paths []string, w io.Writer) error {
	if len(paths) == 0 {
		return fmt.Errorf("%w: no paths to read", ErrInvalid)
	}
	rel := make([]string, len(paths))
	for i, p := range paths {
		rel[i] = strings.TrimLeft(p, "/")
		if rel[i] == "" {
			return fmt.Errorf("%w: path %q: name a file or directory below /", ErrInvalid, p)
		}
	}
	return s.tar(ctx, id, client, append([]string{"sh", "-c", `cd / && exec tar -c -f - -- "$@"`, "sh"}, rel...), nil, w)
}

// tar runs a tar command in the sandbox; its failure (a path that does not
// exist, a full disk) is an ErrFailed with tar's own words.
func (s *Session) tar(ctx context.Context, id, client string, argv []string, stdin io.Reader, stdout io.Writer) error {
	stderr := &firstBytes{max: tarStderrKept}
	res, err := s.Exec(ctx, id, client, ExecRequest{Argv: argv, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%w: tar in sandbox %s exited %d: %s", ErrFailed, id, res.ExitCode, stderr)
	}
	return nil
}

// tarStderrKept is how much of tar's complaints an error keeps: a tar
// (or something in the image posing as it) writing without end must not
// fill serve's memory.
const tarStderrKept = 16 << 10

// firstBytes keeps the first max bytes written to it and counts the rest.
type firstBytes struct {
	max     int
	kept    []byte
	dropped int64
}

func (f *firstBytes) Write(p []byte) (int, error) {
	keep := min(len(p), f.max-len(f.kept))
	f.kept = append(f.kept, p[:keep]...)
	f.dropped += int64(len(p) - keep)
	return len(p), nil
}

func (f *firstBytes) String() string {
	s := strings.TrimSpace(string(f.kept))
	if f.dropped > 0 {
		s += fmt.Sprintf(" … (%d bytes more)", f.dropped)
	}
	return s
}

type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
