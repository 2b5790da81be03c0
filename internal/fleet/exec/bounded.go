package exec

import (
	"context"
	"time"
)

// Bounded runs r through run and stops it when timeout passes, as
// timeout(1) would, but in the sandbox: its whole process tree is killed
// (what it started in the background too), the stream is left to end, and
// the result is TimedOut with exit code 124 and the output so far. A
// timeout of 0 runs r as it is. An error is a failure to run the command,
// never the command's own end.
func Bounded(ctx context.Context, run func(context.Context, Request) (int, error), r Request, timeout time.Duration) (Result, error) {
	if timeout <= 0 {
		code, err := run(ctx, r)
		return Result{ExitCode: code}, err
	}
	pids := NewPIDReader(r.Stderr)
	r.Command, r.Stderr = Announced(r.Command), pids
	sctx, cancel := context.WithCancel(ctx)
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
	}
	kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer kcancel()
	pid, _ := pids.PID(kctx)
	kerr := Signal(kctx, run, r.Container, "KILL", pid, Tree)
	select {
	case e := <-done:
		if e.err != nil && kerr != nil {
			// Neither the command's stream nor the signal got through:
			// the sandbox is likely gone.
			return Result{}, e.err
		}
	case <-time.After(killGrace):
		// A process outside the tree holds the stream open (it escaped
		// with setsid, or took the output with it): the command is over.
		cancel()
		<-done
	}
	return Result{ExitCode: TimeoutExitCode, TimedOut: true}, nil
}
