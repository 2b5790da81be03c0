package exec

import (
	"context"
	"time"
)

// Bounded runs r through run and stops it when timeout passes, as
// timeout(1) would, but in the sandbox: its whole process tree is killed
// (what it started in the background too), the stream is left to end, and
// the result is TimedOut with exit code 124 and the output so far. When
// ctx ends first the command is killed the same way and ctx's error
// returned. A timeout of 0 runs r as it is. An error is a failure to run
// the command, never the command's own end.
func Bounded(ctx context.Context, run Runner, r Request, timeout time.Duration) (Result, error) {
	if timeout <= 0 {
		code, err := run(ctx, r)
		return Result{ExitCode: code}, err
	}
	pids := newPIDReader(r.Stderr)
	r.Command, r.Stderr = announced(r.Command), pids
	// The stream outlives ctx by the moment it takes to stop the command:
	// a caller that gives up must not leave it running.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	done := make(chan exchanged, 1)
	go func() {
		code, err := run(sctx, r)
		_ = pids.Flush()
		done <- exchanged{code, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case e := <-done:
		return Result{ExitCode: e.code}, e.err
	case <-t.C:
	case <-ctx.Done():
		stop(ctx, run, r.Container, pids, done, cancel)
		return Result{}, context.Cause(ctx)
	}
	if e, kerr := stop(ctx, run, r.Container, pids, done, cancel); e.err != nil && kerr != nil {
		// Neither the command's stream nor the signal got through: the
		// sandbox is likely gone.
		return Result{}, e.err
	}
	return Result{ExitCode: TimeoutExitCode, TimedOut: true}, nil
}

// stop kills the tree of the command whose PID pids read and waits a
// moment for its stream to end, then cuts it: a process outside the tree
// (one that escaped with setsid, or took the output with it) may hold it
// open. It returns the stream's end, if it came, and the signal's error.
func stop(ctx context.Context, run Runner, container string, pids *pidReader, done <-chan exchanged, cancel context.CancelFunc) (exchanged, error) {
	kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer kcancel()
	pid, _ := pids.PID(kctx)
	kerr := Signal(kctx, run, container, "KILL", pid, Tree)
	select {
	case e := <-done:
		return e, kerr
	case <-time.After(killGrace):
		cancel()
		<-done
		return exchanged{}, kerr
	}
}
