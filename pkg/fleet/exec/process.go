package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Process is a command started in a sandbox that its caller drives while
// it runs: its output is kept as events to read as they come (from the
// start, by any number of readers), its stdin written to, signals sent to
// it, its end waited for.
type Process struct {
	run       Runner
	container string
	stdin     *io.PipeWriter
	pids      *pidReader
	cancel    context.CancelFunc

	mu      sync.Mutex
	changed chan struct{}
	events  []Event
	// dropped counts the events let go from the front, past MaxKept bytes.
	dropped, kept int
	// end is the last event, once the process ended.
	end *Event
}

// Event is a piece of a process's output, or its end.
type Event struct {
	// Stream is "stdout" or "stderr"; empty on the end, which has Result.
	Stream string
	Data   []byte
	End    bool
	Result Result
	// Err, on the end, says the process's end was not seen: the stream
	// broke (the sandbox may be lost).
	Err error
}

// MaxKept bounds the output a Process keeps for readers: past it the
// oldest is let go, and a reader starting earlier is told how much. Each
// event counts eventCost besides its bytes, so that many small writes (a
// byte at a time) cost no more memory than the bound says.
const MaxKept = 16 << 20

// eventCost is what keeping an event costs beyond its data: the Event and
// its slice header, and the allocation's rounding.
const eventCost = 128

// StartProcess starts r's command through run, in r's container.
func StartProcess(ctx context.Context, run Runner, r Request) *Process {
	inR, inW := io.Pipe()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Process{run: run, container: r.Container, stdin: inW, cancel: cancel, changed: make(chan struct{})}
	p.pids = newPIDReader(p.writer("stderr"))
	r.Command, r.Stdin, r.Stdout, r.Stderr = announced(r.Command), inR, p.writer("stdout"), p.pids
	go func() {
		code, err := run(ctx, r)
		_ = p.pids.Flush()
		inR.CloseWithError(errors.New("the process ended"))
		p.mu.Lock()
		p.end = &Event{End: true, Result: Result{ExitCode: code}, Err: err}
		p.events = append(p.events, *p.end)
		p.notify()
		p.mu.Unlock()
	}()
	return p
}

// notify wakes the readers. Callers hold p.mu.
func (p *Process) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

type streamWriter struct {
	p      *Process
	stream string
}

func (p *Process) writer(stream string) io.Writer { return streamWriter{p, stream} }

func (w streamWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, Event{Stream: w.stream, Data: append([]byte(nil), b...)})
	p.kept += len(b) + eventCost
	for p.kept > MaxKept && len(p.events) > 1 {
		p.kept -= len(p.events[0].Data) + eventCost
		p.events = p.events[1:]
		p.dropped++
	}
	p.notify()
	return len(b), nil
}

// Events calls fn with the process's events from the from-th on (0: the
// first), as they come, until its end or ctx's. It returns the index after
// the last event given; events let go past MaxKept are an error naming
// how many.
func (p *Process) Events(ctx context.Context, from int, fn func(Event) error) (int, error) {
	for {
		p.mu.Lock()
		if from < p.dropped {
			n := p.dropped
			p.mu.Unlock()
			return from, fmt.Errorf("events %d to %d were let go: the process wrote more than %d MiB that no one read; read from %d", from, n-1, MaxKept>>20, n)
		}
		batch := append([]Event(nil), p.events[from-p.dropped:]...)
		changed := p.changed
		p.mu.Unlock()
		for _, e := range batch {
			if err := fn(e); err != nil {
				return from, err
			}
			from++
			if e.End {
				return from, nil
			}
		}
		select {
		case <-ctx.Done():
			return from, context.Cause(ctx)
		case <-changed:
		}
	}
}

// WriteStdin writes b to the process's stdin.
func (p *Process) WriteStdin(b []byte) error {
	if _, err := p.stdin.Write(b); err != nil {
		return fmt.Errorf("writing to the process's stdin: %w", err)
	}
	return nil
}

// CloseStdin closes the process's stdin: it reads EOF.
func (p *Process) CloseStdin() error { return p.stdin.Close() }

// Signal sends sig (one of Signals) to the process and what it started.
func (p *Process) Signal(ctx context.Context, sig string) error {
	if p.Done() {
		return nil
	}
	pid, err := p.pids.PID(ctx)
	if err != nil {
		return err
	}
	if pid == 0 {
		return errors.New("the process did not start")
	}
	return Signal(ctx, p.run, p.container, sig, pid, Tree)
}

// Done says whether the process has ended.
func (p *Process) Done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.end != nil
}

// Wait waits for the process's end or ctx's.
func (p *Process) Wait(ctx context.Context) (Result, error) {
	for {
		p.mu.Lock()
		end, changed := p.end, p.changed
		p.mu.Unlock()
		if end != nil {
			return end.Result, end.Err
		}
		select {
		case <-ctx.Done():
			return Result{}, context.Cause(ctx)
		case <-changed:
		}
	}
}

// Stop kills the process and what it started, and ends its stream.
func (p *Process) Stop(ctx context.Context) {
	if !p.Done() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = p.Signal(sctx, "KILL")
		cancel()
		wctx, wcancel := context.WithTimeout(ctx, killGrace)
		_, _ = p.Wait(wctx)
		wcancel()
	}
	p.cancel()
	_ = p.stdin.Close()
}
