package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracing"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// RunOptions say what to do in each sandbox and what to do with results.
type RunOptions struct {
	Work Work
	// Skip, when set, reports a task of an epoch as done already, so that
	// a resumed run does not do it again.
	Skip func(epoch int, taskID string) bool
	// OnResult is called once per finished task, one call at a time.
	OnResult func(Result)
	// TaskTimeout bounds each task's work; 0 is no bound. Work past it is
	// stopped (ExecWork's command in the sandbox, with what it started;
	// LocalWork's process group) and its result TimedOut.
	TaskTimeout time.Duration
}

// Result is the outcome of one task in one epoch.
type Result struct {
	ID            string `json:"id"`
	Image         string `json:"image"`
	OriginalImage string `json:"originalImage,omitempty"`
	Epoch         int    `json:"epoch"`
	// OK is true when the work ran and exited 0.
	OK bool `json:"ok"`
	// Error says why the task did not run or did not succeed.
	Error string `json:"error,omitempty"`
	// Verdict says whose fault a failure is: "task" (the work ran and
	// exited non-zero) or "infra" (the sandbox could not start or was
	// lost, a wait timed out, the cluster failed); Reason says, for
	// infra, what failed (package verdict). Both are empty on success.
	Verdict string `json:"verdict,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// ExitCode is set when the work ran to completion, or was stopped at
	// the task's timeout (124, as timeout(1) gives, with TimedOut): a
	// timeout is the task's failure, scored, not the infrastructure's.
	ExitCode *int   `json:"exitCode,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	// Reused is true when the task ran on a sandbox reset after another
	// task of its image (recycle), Resets how many resets that sandbox
	// had had.
	Reused bool `json:"reused,omitempty"`
	Resets int  `json:"resets,omitempty"`
	// Warm is true when the task did not wait for a sandbox to start: its
	// claim found a Ready one in the pool, or it was recycled.
	Warm bool `json:"warm,omitempty"`
	// Phases are the task's claim, process and release times in seconds:
	// under recycling, claim includes recording a fresh sandbox, and
	// release the reset that readies it for the next task.
	Phases   map[string]float64 `json:"phases"`
	Cluster  string             `json:"cluster,omitempty"`
	Node     string             `json:"node,omitempty"`
	Sandbox  string             `json:"sandbox,omitempty"`
	Pod      string             `json:"pod,omitempty"`
	Started  time.Time          `json:"started"`
	Finished time.Time          `json:"finished"`
}

// OvercommitError is the runaway breaker's verdict: the run held more live
// sandboxes than it should for a sustained stretch, and was torn down.
type OvercommitError struct {
	Live, Ceiling, Expected int
}

func (e *OvercommitError) Error() string {
	return fmt.Sprintf("runaway breaker tripped: %d live sandboxes stayed above the ceiling of %d (expected %d); the run was torn down. "+
		"If the run really needs that many, raise overcommitFactor or maxLiveSandboxes", e.Live, e.Ceiling, e.Expected)
}

// Run runs the run, all of it: it starts it (Start: preflight and the
// heartbeat; when that fails nothing was created, the error says so and
// matches ErrNothingCreated), pre-pulls its images when WithPrepull says
// so, does every task under the configured strategy and epochs, calling
// o.OnResult as tasks finish, tears down everything the run created —
// also when ctx ends or the breaker trips — unless KeepWarm is set and
// the run succeeded, deletes its PrepullJobs, stops its heartbeat, and
// returns the run report. A failed task is a result, not an error; the
// error is for runs that could not go on, and every task they did not
// finish has a result saying so.
func (f *Fleet) Run(ctx context.Context, o RunOptions) (rep report.Report, err error) {
	ctx, span := tracing.Tracer().Start(ctx, "run", trace.WithAttributes(tracing.RunID.String(f.runID),
		attribute.String("sandbox_fleet.strategy", f.cfg.Strategy), attribute.Int("sandbox_fleet.tasks", len(f.tasks)*f.cfg.Epochs)))
	defer func() { tracing.End(span, err) }()
	beats, err := f.Start(ctx)
	if err != nil {
		return report.Report{}, err
	}
	// The heartbeat tells `reap --orphans` the run's driver is alive; it
	// stops once the run's objects are gone, so a run whose driver was
	// killed is reaped and a live one not.
	defer f.settle(ctx, "stopping the run's heartbeat (`reap --orphans` takes the run once its Lease expires)", beats.Stop)
	if f.driving.prepull || f.plansPulls() {
		defer f.settle(ctx, "deleting the run's PrepullJobs", f.Unprepull)
	}
	return f.run(ctx, o)
}

// settle does what a run does after its end, however it ended, with time
// of its own; what fails is logged: the run's outcome stands.
func (f *Fleet) settle(ctx context.Context, what string, do func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := do(ctx); err != nil {
		f.log.Error(err, "After the run: "+what+" failed")
	}
}

// run is Run's run once started: the pre-pull, the passes and the
// teardown.
func (f *Fleet) run(ctx context.Context, o RunOptions) (rep report.Report, err error) {
	start := time.Now()
	f.stats.started.Store(start.UnixNano())
	env := f.environment(ctx)

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if f.plansPulls() {
		// Before the breaker starts: the plan may size the pools anew.
		f.planPulls(runCtx)
	}
	if f.cfg.Warming().Ahead {
		f.warmAheadWaits = f.crowded(runCtx)
	}
	stopBreaker := f.startBreaker(runCtx, cancel)
	if f.driving.prepull {
		err = f.prepull(runCtx)
	}

	var resultMu sync.Mutex
	reported := map[taskRef]bool{}
	onResult := func(r Result) {
		resultMu.Lock()
		defer resultMu.Unlock()
		reported[taskRef{r.Epoch, r.ID}] = true
		if o.OnResult != nil {
			o.OnResult(r)
		}
	}
	for epoch := 1; epoch <= f.cfg.Epochs && err == nil; epoch++ {
		if f.cfg.Epochs > 1 {
			f.log.Info("Epoch", "epoch", epoch, "of", f.cfg.Epochs)
		}
		err = f.pass(runCtx, epoch, o, onResult)
	}
	tripped := stopBreaker()
	if tripped != nil {
		err = tripped
	} else if err == nil && context.Cause(runCtx) != nil {
		err = context.Cause(runCtx)
	}
	if err != nil {
		// Every task has a result: those the run ended before fail with
		// its error, as not run.
		for _, r := range f.notStarted(reported, o, err) {
			onResult(r)
		}
	}

	if err == nil && f.cfg.KeepWarm {
		// The pools stay for the next run; the claims of this one go.
		var images []string
		for _, p := range f.plan.Pools {
			images = append(images, p.Image)
		}
		// The run's own context may have ended; the releases still need a
		// deadline of their own.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReadyTimeout.Duration)
		if rerr := f.releaseClean(rctx, images); rerr != nil {
			f.log.Error(rerr, "Releasing the run's kept sandboxes failed")
		}
		rcancel()
	}
	if err != nil || !f.cfg.KeepWarm {
		// The run's own context may be what ended; teardown must still run.
		tctx, tcancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReadyTimeout.Duration)
		defer tcancel()
		if terr := f.Teardown(tctx); terr != nil {
			err = errors.Join(err, &TeardownError{RunID: f.runID, Err: terr})
		}
	}
	if m := f.driving.metrics; m != nil {
		m.Run(err == nil, time.Since(start))
	}
	rep = f.rec.Report(time.Since(start))
	rep.Environment = env
	rep.Throttled = f.throttled()
	for _, c := range f.clusters {
		rep.SandboxesPeak += c.tracker.Peak()
	}
	return rep, err
}

// taskRef names a task of an epoch.
type taskRef struct {
	epoch int
	id    string
}

// notStarted are the results of the tasks of every epoch that neither
// reported one nor were skipped, when the run ended early with err: each
// failed, not run, for err's reason.
func (f *Fleet) notStarted(reported map[taskRef]bool, o RunOptions, err error) []Result {
	var out []Result
	now := time.Now()
	for epoch := 1; epoch <= f.cfg.Epochs; epoch++ {
		for _, t := range f.tasks {
			if reported[taskRef{epoch, t.ID}] || o.Skip != nil && o.Skip(epoch, t.ID) {
				continue
			}
			f.finished("", false, false, 0)
			out = append(out, Result{ID: t.ID, Image: t.Image, OriginalImage: t.OriginalImage, Epoch: epoch,
				Error: "not started: the run ended first: " + err.Error(), Verdict: verdict.Infra, Reason: verdict.Reason(err),
				Started: now, Finished: now, Phases: map[string]float64{}})
		}
	}
	return out
}

// pass runs one epoch of the strategy over the tasks not yet done.
func (f *Fleet) pass(ctx context.Context, epoch int, o RunOptions, onResult func(Result)) error {
	var todo []tasks.Task
	for _, t := range f.tasks {
		if o.Skip != nil && o.Skip(epoch, t.ID) {
			f.stats.total.Add(-1)
			continue
		}
		todo = append(todo, t)
	}
	if f.pulls != nil {
		queues, left := f.pulls.queues(todo)
		orphans, err := f.runQueues(ctx, epoch, queues, o, onResult)
		if err != nil {
			return err
		}
		// What the plan left out, or no planned node was left for, runs
		// in the strategy's windows.
		todo = append(left, orphans...)
	}
	images := imagesOf(todo)
	byImage := map[string][]tasks.Task{}
	for _, t := range todo {
		byImage[t.Image] = append(byImage[t.Image], t)
	}
	planned := map[string]int{}
	for _, p := range f.plan.Pools {
		planned[p.Image] = p.Replicas
	}
	replicas := func(image string) int { return depth(f.cfg, f.Recycling(), planned[image], len(byImage[image])) }
	names := make([]string, len(images))
	for i, img := range images {
		names[i] = img.Name
	}
	windows := chunk(names, windowSize(f.cfg, f.plan, len(names)))
	tasksOf := func(window []string) []tasks.Task {
		var out []tasks.Task
		for _, img := range window {
			out = append(out, byImage[img]...)
		}
		return Interleave(out)
	}
	strategy := f.cfg.Warming()
	letGo := strategy.LetsGo(len(windows))
	process := func(ctx context.Context, window []string, failed WarmError, allClaimed func()) {
		f.process(ctx, epoch, tasksOf(window), failed, !letGo, o, onResult, allClaimed)
	}

	if strategy.Ahead {
		// Each window's span holds the warming of the next, which goes on
		// while its tasks run.
		var failed WarmError
		for n, window := range windows {
			err := f.window(ctx, epoch, n, window, func(ctx context.Context) (err error) {
				if n == 0 {
					if failed, err = f.warmWindow(ctx, window, replicas); err != nil {
						return err
					}
				}
				failed, err = f.pipelinedStep(ctx, window, windows[n+1:], failed, letGo, replicas, process)
				return err
			})
			if err != nil {
				return err
			}
		}
		return context.Cause(ctx)
	}
	for n, window := range windows {
		err := f.window(ctx, epoch, n, window, func(ctx context.Context) error {
			failed, err := f.warmWindow(ctx, window, replicas)
			if err != nil {
				return err
			}
			process(ctx, window, failed, nil)
			if letGo {
				return f.unwarmWindow(ctx, window)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return context.Cause(ctx)
}

// window does the work of window n of an epoch in a span of its own.
func (f *Fleet) window(ctx context.Context, epoch, n int, images []string, work func(context.Context) error) (err error) {
	ctx, span := tracing.Tracer().Start(ctx, "window", trace.WithAttributes(attribute.Int("sandbox_fleet.epoch", epoch),
		attribute.Int("sandbox_fleet.window", n), attribute.Int("sandbox_fleet.images", len(images))))
	defer func() { tracing.End(span, err) }()
	return work(ctx)
}

// pipelinedStep runs window while the next of rest warms, unwarms window,
// and returns what the next window's warming gave up. Where the nodes
// cannot hold the run's peak (warmAheadWaits), the next window starts
// warming only once every task of this one holds a sandbox: until then
// its warm sandboxes would take the slots this window's claims wait for.
// It always waits for that warming to end — cancelled when the step
// fails — so that no pool is still being created when teardown runs.
func (f *Fleet) pipelinedStep(ctx context.Context, window []string, rest [][]string, failed WarmError, letGo bool,
	replicas func(string) int, process func(context.Context, []string, WarmError, func())) (WarmError, error) {
	type prefetched struct {
		failed WarmError
		err    error
	}
	var next chan prefetched
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	claimed := make(chan struct{})
	allClaimed := sync.OnceFunc(func() { close(claimed) })
	if len(rest) > 0 {
		next = make(chan prefetched, 1)
		go func() {
			if f.warmAheadWaits {
				select {
				case <-claimed:
				case <-pctx.Done():
				}
			}
			start := time.Now()
			failed, err := f.warmWindow(pctx, rest[0], replicas)
			f.phase("prefetch", "", time.Since(start))
			next <- prefetched{failed, err}
		}()
	}
	process(ctx, window, failed, allClaimed)
	// A window whose tasks did not all claim (the run ended) claims no more.
	allClaimed()
	// Unwarm this window before waiting for the next, so that no more
	// than two windows are ever warm.
	var err error
	if letGo {
		err = f.unwarmWindow(ctx, window)
	}
	if next == nil {
		return nil, err
	}
	if err != nil {
		cancel()
	}
	p := <-next
	if err != nil {
		return nil, err
	}
	return p.failed, p.err
}

// unwarmWindow unwarms a window that has run. When the run was stopped,
// that is what it says: teardown removes the window, and the errors of
// deleting with a cancelled context would only hide why the run ended.
func (f *Fleet) unwarmWindow(ctx context.Context, window []string) error {
	err := f.Unwarm(ctx, window)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// Interleave orders tasks so that every stretch of the order holds each
// image's tasks in proportion to its share of them: the i-th of an image's
// n tasks goes at (i+½)/n of the way. Pools are sized to those shares of
// the concurrency, so the tasks in flight at any moment then match the
// pools' depths, instead of one image's tasks exhausting its pool while
// the others' sit idle. Ties keep the input order.
func Interleave(ts []tasks.Task) []tasks.Task {
	count := map[string]int{}
	for _, t := range ts {
		count[t.Image]++
	}
	type keyed struct {
		at float64
		t  tasks.Task
	}
	seen := map[string]int{}
	order := make([]keyed, len(ts))
	for i, t := range ts {
		order[i] = keyed{at: (float64(seen[t.Image]) + 0.5) / float64(count[t.Image]), t: t}
		seen[t.Image]++
	}
	slices.SortStableFunc(order, func(a, b keyed) int { return cmp.Compare(a.at, b.at) })
	out := make([]tasks.Task, len(ts))
	for i, k := range order {
		out[i] = k.t
	}
	return out
}

// warmWindow warms images within the ready timeout. Pools that cannot
// become Ready are returned, and removed, so their tasks fail while the
// others run; other errors end the run.
func (f *Fleet) warmWindow(ctx context.Context, images []string, replicas func(string) int) (_ WarmError, err error) {
	ctx, span := tracing.Tracer().Start(ctx, "warm", trace.WithAttributes(attribute.StringSlice("sandbox_fleet.images", images)))
	defer func() { tracing.End(span, err) }()
	wctx, cancel := context.WithTimeout(ctx, f.cfg.ReadyTimeout.Duration)
	defer cancel()
	err = f.Warm(wctx, images, replicas)
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	var failed WarmError
	if !errors.As(err, &failed) {
		return nil, err
	}
	if len(failed) > 0 {
		var gone []string
		for _, img := range images {
			if err := failed[resources.PoolName(f.runID, img)]; err != nil {
				gone = append(gone, img)
				f.log.Error(err, "Giving up a pool", "image", img)
			}
		}
		if err := f.Unwarm(ctx, gone); err != nil {
			return nil, err
		}
	}
	return failed, nil
}

// process runs ts, up to the concurrency at once; under recycling, one
// task of an image at a time (see lanes), a sandbox kept for the next
// epoch's tasks too when the pools are keptBetweenEpochs. Tasks whose
// pool failed fail at once. Tasks not started when ctx ends get no
// result, so that a resumed run does them. allClaimed, when set, is
// called once every task of ts has a sandbox or has given up.
func (f *Fleet) process(ctx context.Context, epoch int, ts []tasks.Task, failed WarmError, keptBetweenEpochs bool, o RunOptions,
	onResult func(Result), allClaimed func()) {
	l, stop := newLanes(ctx, ts, f.Recycling())
	defer stop()
	// The lanes say when an image's last task has claimed; ts has when
	// every image's has.
	var imagesLeft atomic.Int64
	imagesLeft.Store(int64(len(imagesOf(ts))))
	workers := min(concurrency(f.cfg), len(ts))
	if f.Recycling() {
		workers = min(workers, len(imagesOf(ts)))
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				t, ok := l.next()
				if !ok {
					return
				}
				// A sandbox is kept for the image's next task, in this
				// pass or, where pools stay warm between epochs, the next.
				kept := epoch < f.cfg.Epochs && keptBetweenEpochs
				keep := func() bool { return l.more(t.Image) || kept }
				// Once the image's last claim has its sandbox, Ready or
				// not, what its pool holds or refills no task will take.
				bound := func() {
					if l.bound(t.Image) && !kept && !f.cfg.KeepWarm {
						f.drain(ctx, t.Image)
					}
				}
				claimed := func() {
					if l.claimed(t.Image) && imagesLeft.Add(-1) == 0 && allClaimed != nil {
						allClaimed()
					}
				}
				onResult(f.task(ctx, epoch, t, failed, o, keep, bound, claimed))
				l.done(t.Image)
			}
		})
	}
	wg.Wait()
}

// task claims a sandbox for t — or, under recycling, takes over the one
// the last task of its image left clean — calls bound once its
// claim names its sandbox and claimed once that sandbox is Ready, each
// also when it has given up, does the work in it and gives it back (GiveBack),
// keeping it for the next task of the image when keep says there is one.
// The result is named so that the deferred end time lands in what is
// returned.
func (f *Fleet) task(ctx context.Context, epoch int, t tasks.Task, failed WarmError, o RunOptions, keep func() bool, bound, claimed func()) (r Result) {
	claimedOnce := sync.OnceFunc(claimed)
	defer claimedOnce()
	boundOnce := sync.OnceFunc(bound)
	defer boundOnce()
	f.stats.running.Add(1)
	defer f.stats.running.Add(-1)
	r = Result{ID: t.ID, Image: t.Image, OriginalImage: t.OriginalImage, Epoch: epoch, Started: time.Now(), Phases: map[string]float64{}}
	ctx, span := tracing.Tracer().Start(ctx, "task", trace.WithAttributes(tracing.TaskID.String(t.ID),
		tracing.TaskImage.String(t.Image), attribute.Int("sandbox_fleet.epoch", epoch)))
	cluster := ""
	defer func() {
		r.Finished = time.Now()
		f.finished(cluster, r.OK, r.ExitCode != nil, r.Finished.Sub(r.Started))
		verdict := cmp.Or(r.Verdict, "ok")
		span.SetAttributes(tracing.Cluster.String(r.Cluster), tracing.Node.String(r.Node),
			attribute.String("sandbox_fleet.verdict", verdict), attribute.Bool("sandbox_fleet.reused", r.Reused))
		if r.Error != "" {
			span.SetStatus(codes.Error, r.Error)
		}
		span.End()
	}()
	if err := failed[resources.PoolName(f.runID, t.Image)]; err != nil {
		r.Error = fmt.Sprintf("task %s: the warm pool of %s was given up: %v", t.ID, t.Image, err)
		r.Verdict, r.Reason = verdict.Infra, verdict.Start
		return r
	}

	s := f.claimFor(ctx, t, &r, boundOnce)
	boundOnce()
	claimedOnce()
	if s == nil {
		return r
	}
	cluster = s.Cluster
	err := f.runWork(ctx, t, s, o, &r)
	// A sandbox whose work could not run may be lost or wedged: it is
	// not reused.
	f.releaseTask(ctx, s, err == nil && ctx.Err() == nil && keep(), &r)
	return r
}

// claimFor takes a clean sandbox kept for t's image, or claims one (see
// acquire for bound), and records it in r; on failure it records that and
// returns nil.
func (f *Fleet) claimFor(ctx context.Context, t tasks.Task, r *Result, bound func()) *Sandbox {
	start := time.Now()
	ctx, span := tracing.Tracer().Start(ctx, "claim")
	s := f.TakeClean(t)
	if s == nil {
		var err error
		if s, err = f.acquire(ctx, t, nil, bound); err != nil {
			r.Phases["claim"] = time.Since(start).Seconds()
			r.Error = err.Error()
			r.Verdict, r.Reason = verdict.Infra, verdict.Reason(err)
			tracing.End(span, err)
			return nil
		}
		f.Record(ctx, s)
	}
	span.SetAttributes(tracing.Sandbox.String(s.Sandbox), tracing.Warm.Bool(s.Warm || s.Resets > 0))
	span.End()
	r.Phases["claim"] = time.Since(start).Seconds()
	r.Reused, r.Resets = s.Resets > 0, s.Resets
	r.Warm = s.Warm || r.Reused
	if r.Reused {
		f.rec.Reused()
	}
	r.Cluster, r.Node, r.Sandbox, r.Pod = s.Cluster, s.Node, s.Sandbox, s.Pod
	return s
}

// runWork runs o's work for t in s, within the task's timeout, and
// records its outcome in r: the work's exit code (the task's verdict),
// or the failure to run it (infra: the sandbox lost, the work timed out,
// the exec failed), which it returns.
func (f *Fleet) runWork(ctx context.Context, t tasks.Task, s *Sandbox, o RunOptions, r *Result) error {
	start := time.Now()
	pctx, span := tracing.Tracer().Start(ctx, "process")
	wctx, cancel := pctx, context.CancelFunc(func() {})
	if o.TaskTimeout > 0 {
		deadline := time.Now().Add(o.TaskTimeout)
		wctx, cancel = context.WithDeadline(withTaskDeadline(pctx, deadline), deadline.Add(stopGrace))
	}
	out, err := o.Work(wctx, t, s)
	cancel()
	tracing.End(span, err)
	r.Phases["process"] = time.Since(start).Seconds()
	f.phase("process", s.Cluster, time.Since(start))
	r.Stdout, r.Stderr = out.Stdout, out.Stderr
	if err != nil {
		// A failure to run work is most often the sandbox going away.
		var lost *LostError
		if aerr := s.Alive(context.WithoutCancel(ctx)); errors.As(aerr, &lost) {
			err = lost
		} else if wctx.Err() != nil && ctx.Err() == nil {
			err = verdict.Infrastructure(verdict.Timeout, fmt.Errorf("task %s: work timed out after %s: %w", t.ID, o.TaskTimeout, err))
		} else {
			err = verdict.Infrastructure(verdict.Exec, err)
		}
		r.Error = err.Error()
		r.Verdict, r.Reason = verdict.Infra, verdict.Reason(err)
		return err
	}
	r.ExitCode = &out.ExitCode
	r.OK = out.ExitCode == 0 && !out.TimedOut
	r.TimedOut = out.TimedOut
	switch {
	case out.TimedOut:
		r.Error = fmt.Sprintf("timed out after %s: stopped, with what it started", o.TaskTimeout)
		r.Verdict = verdict.Task
	case !r.OK:
		r.Error = fmt.Sprintf("exit code %d", out.ExitCode)
		r.Verdict = verdict.Task
	}
	return nil
}

// releaseTask gives s back — kept clean for its image's next task when keep,
// else deleted — and records how long that took in r.
func (f *Fleet) releaseTask(ctx context.Context, s *Sandbox, keep bool, r *Result) {
	start := time.Now()
	ctx, span := tracing.Tracer().Start(context.WithoutCancel(ctx), "release")
	outcome, err := f.GiveBack(ctx, s, keep)
	if err != nil {
		f.log.Error(err, "Giving a sandbox back failed", "sandbox", s.Sandbox, "outcome", outcome)
	}
	span.SetAttributes(tracing.Outcome.String(string(outcome)))
	tracing.End(span, err)
	r.Phases["release"] = time.Since(start).Seconds()
}
