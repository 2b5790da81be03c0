package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/recycle"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// recycler keeps, by image, the run's sandboxes that came clean from a
// reset, for the next task of their image (recycle.enabled).
type recycler struct {
	spec         recycle.Spec
	maxReuses    int
	resetTimeout time.Duration

	mu   sync.Mutex
	free map[string][]*Sandbox
	// unrecyclable are the images found not recyclable, each said once in
	// the log; their tasks take a fresh sandbox each.
	unrecyclable map[string]bool
}

func newRecycler(cfg config.Fleet) *recycler {
	r := cfg.Recycle
	if !r.Enabled {
		return nil
	}
	return &recycler{
		spec: recycle.Spec{Workdir: r.Workdir, CheckEnv: r.CheckEnv, CheckFiles: r.CheckConfig.Files,
			CheckCommands: r.CheckConfig.Commands, Canary: r.Canary},
		maxReuses: r.MaxReuses, resetTimeout: r.ResetTimeout.Duration,
		free: map[string][]*Sandbox{}, unrecyclable: map[string]bool{},
	}
}

// Recycling reports whether the run resets sandboxes for reuse.
func (f *Fleet) Recycling() bool { return f.recycler != nil }

// TakeClean returns, for t, a sandbox of t's image that came clean from a
// reset and waits for its next task, or nil when there is none.
func (f *Fleet) TakeClean(t tasks.Task) *Sandbox {
	rc := f.recycler
	if rc == nil {
		return nil
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	free := rc.free[t.Image]
	if len(free) == 0 {
		return nil
	}
	s := free[len(free)-1]
	rc.free[t.Image] = free[:len(free)-1]
	s.TaskID = t.ID
	return s
}

// Record notes what a freshly claimed sandbox is before its first task
// changes it — its work tree's commit, refs and ignored files, and the
// opt-in fingerprints — so that it can be reset to that. A sandbox that
// cannot be recorded is not recycled: it is released after its task. An
// image whose sandboxes cannot be recycled (no git work tree, processes
// besides the keepalive) is said once in the log, and its sandboxes are
// not recorded again.
func (f *Fleet) Record(ctx context.Context, s *Sandbox) {
	rc := f.recycler
	if rc == nil {
		return
	}
	rc.mu.Lock()
	skip := rc.unrecyclable[s.image]
	rc.mu.Unlock()
	if skip {
		return
	}
	start := time.Now()
	defer func() { f.phase("record", s.cluster.Name, time.Since(start)) }()
	ctx, cancel := context.WithTimeout(ctx, rc.resetTimeout)
	defer cancel()
	out, err := s.script(ctx, rc.spec.Record())
	var b recycle.Baseline
	if err == nil {
		b, err = recycle.ParseRecord(out)
	}
	switch {
	case err != nil:
		f.log.Error(err, "A sandbox will not be recycled", "sandbox", s.Sandbox, "image", s.image)
	case !b.Recyclable:
		rc.mu.Lock()
		said := rc.unrecyclable[s.image]
		rc.unrecyclable[s.image] = true
		rc.mu.Unlock()
		if !said {
			f.log.Info("An image is not recycled: its tasks take a fresh sandbox each", "image", s.image, "reason", b.Reason)
		}
	default:
		s.baseline = &b
	}
}

// Outcome is what GiveBack did with a sandbox.
type Outcome string

const (
	// Released: the sandbox was deleted.
	Released Outcome = "released"
	// Kept: it came clean from a reset and waits for the next task of its
	// image.
	Kept Outcome = "reset"
	// Quarantined: its reset failed, timed out or did not verify, or its
	// command sessions broke; it was deleted.
	Quarantined Outcome = "quarantined"
	// Rotated: it had had maxReuses resets; it was deleted.
	Rotated Outcome = "rotated"
)

// GiveBack returns a sandbox whose task has ended. When the run recycles,
// keep is set (another task of its image is to come) and the sandbox was
// recorded, it is reset and, once it verifies clean, kept for the next
// task of its image (phase reset). A reset that fails, times out or does
// not verify quarantines it, and a sandbox that has had maxReuses resets
// rotates: both are released, and the next task of the image claims a
// fresh one. Otherwise the sandbox is released. The error is the
// release's.
func (f *Fleet) GiveBack(ctx context.Context, s *Sandbox, keep bool) (Outcome, error) {
	rc := f.recycler
	start := time.Now()
	switch {
	case rc == nil || !keep || s.baseline == nil:
		return Released, f.Release(ctx, s)
	case s.shellBroken():
		f.log.Info("Quarantining a sandbox: its command session broke twice", "sandbox", s.Sandbox, "image", s.image)
		return Quarantined, f.releaseAs(ctx, s, "quarantine", start)
	case s.Resets >= rc.maxReuses:
		return Rotated, f.releaseAs(ctx, s, "rotate", start)
	}
	if err := f.reset(ctx, s); err != nil {
		f.log.Error(err, "Quarantining a sandbox: its reset failed", "sandbox", s.Sandbox, "image", s.image)
		// The failed reset is part of what the quarantine cost.
		return Quarantined, f.releaseAs(ctx, s, "quarantine", start)
	}
	f.phase("reset", s.cluster.Name, time.Since(start))
	s.Resets++
	rc.mu.Lock()
	rc.free[s.image] = append(rc.free[s.image], s)
	rc.mu.Unlock()
	return Kept, nil
}

// releaseAs releases s and records phase, begun at start, on its cluster.
func (f *Fleet) releaseAs(ctx context.Context, s *Sandbox, phase string, start time.Time) error {
	err := f.Release(ctx, s)
	f.phase(phase, s.cluster.Name, time.Since(start))
	return err
}

// reset puts s back to its baseline within the reset timeout and checks
// that it came clean. The reset stops every process but the keepalive,
// the command session's shell too, so the session ends first.
func (f *Fleet) reset(ctx context.Context, s *Sandbox) error {
	rc := f.recycler
	s.closeShell()
	ctx, cancel := context.WithTimeout(ctx, rc.resetTimeout)
	defer cancel()
	out, err := s.script(ctx, rc.spec.Reset(*s.baseline))
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("the reset did not end within %s: %w", rc.resetTimeout, err)
		}
		return fmt.Errorf("the reset could not run: %w", err)
	}
	return rc.spec.Verify(*s.baseline, out)
}

// script runs one of package recycle's scripts in s by an exec of its
// own, never the command session, and returns its stdout; a non-zero
// exit is an error with the end of its stderr.
func (s *Sandbox) script(ctx context.Context, argv []string) ([]byte, error) {
	var stdout bytes.Buffer
	stderr := newTail(TailBytes)
	res, err := s.exec(ctx, exec.Request{Command: argv, Stdout: &stdout, Stderr: stderr})
	switch {
	case err != nil:
		return nil, err
	case res.ExitCode != 0:
		return nil, fmt.Errorf("the script exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// releaseClean releases the clean sandboxes kept for images: their
// images are done.
func (f *Fleet) releaseClean(ctx context.Context, images []string) error {
	rc := f.recycler
	if rc == nil {
		return nil
	}
	rc.mu.Lock()
	var out []*Sandbox
	for _, img := range images {
		out = append(out, rc.free[img]...)
		delete(rc.free, img)
	}
	rc.mu.Unlock()
	// Released side by side: one at a time, a hundred claims are a
	// hundred round trips.
	errs := make([]error, len(out))
	var wg sync.WaitGroup
	slots := make(chan struct{}, parallelReleases)
	for i, s := range out {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = f.Release(ctx, s)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// parallelReleases bounds the releases in flight, well within the
// client's burst (kube.Limits).
const parallelReleases = 16

// forgetClean drops the clean sandboxes kept, whose objects teardown
// deletes. They hold no shell: their reset closed it.
func (f *Fleet) forgetClean() {
	if rc := f.recycler; rc != nil {
		rc.mu.Lock()
		clear(rc.free)
		rc.mu.Unlock()
	}
}
