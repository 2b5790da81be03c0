// Package session is a long-lived fleet session that a training loop
// drives, call by call, instead of handing over a batch: add tasks, warm
// their pools ahead of need, acquire a sandbox, run commands and move files
// in it, release it. `kubectl sandbox-fleet serve` serves one over the
// network (package serve); Go trainers may embed one directly.
//
// A session is one run of the engine (package fleet): one run id on every
// object, its heartbeat Lease renewed while it lives, everything torn down
// at Close. Every sandbox is leased to the client that acquired it; a
// client that stops renewing loses its sandboxes after the lease TTL, so a
// crashed trainer leaks nothing.
package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/heartbeat"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// Options tune a session.
type Options struct {
	// LeaseTTL is how long a client's sandboxes outlive its last call.
	LeaseTTL time.Duration
	// WarmTTL is how long a pool stays warm after it was last asked for,
	// while none of its sandboxes is held.
	WarmTTL time.Duration
	// Heartbeat is how long the run's Lease stays valid unrenewed.
	Heartbeat time.Duration
}

// Defaults for Options.
const (
	DefaultLeaseTTL = time.Minute
	DefaultWarmTTL  = 10 * time.Minute
)

// Errors a caller can tell apart; the server maps them to status codes.
var (
	ErrInvalid  = errors.New("invalid request")
	ErrNotFound = errors.New("not found")
	ErrForeign  = errors.New("held by another client")
	ErrClosed   = errors.New("the session is closed")
	// ErrFailed: a file transfer's command ran in the sandbox and failed.
	ErrFailed = errors.New("failed in the sandbox")
	// ErrNotWarming: a wait for pools that nothing asked to warm.
	ErrNotWarming = errors.New("not warming")
)

// Session is one fleet session. Its methods are safe to call concurrently.
type Session struct {
	fleet *fleet.Fleet
	opts  Options
	// stopBeats ends the run's heartbeat.
	stopBeats func(context.Context) error
	// ctx lives as long as the session; background work runs under it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	tasks    map[string]tasks.Task
	seen     map[string]string // task id -> where it came from
	pools    map[string]*pool
	handles  map[string]*Handle
	requests map[string]*request
	clients  map[string]time.Time // client id -> lease expiry
	counts   Counts
	// acquiring counts the acquires in flight per image.
	acquiring map[string]int
}

// pool is what the session knows of an image's pool beyond the fleet.
type pool struct {
	lastWanted time.Time
	// warming is closed when the warm in flight ends; nil when none is.
	warming chan struct{}
	// again asks for another warm when the one in flight ends (the plan
	// grew meanwhile).
	again bool
	err   error
}

// request is an Acquire, kept so that a retry finds it.
type request struct {
	client string
	// what is the task id or image asked for.
	what   string
	done   chan struct{}
	handle *Handle
	err    error
}

// Handle is a sandbox leased to a client.
type Handle struct {
	*fleet.Sandbox
	Image    string
	Client   string
	released bool
	// tools are its shells and processes, ended at its release.
	tools tools
}

// Counts are the session's totals. Reused counts the acquires served by a
// sandbox reset after an earlier lease, Quarantined the sandboxes deleted
// because their reset failed.
type Counts struct {
	Acquired, Released, Expired, Failed, Execs int64
	Reused, Quarantined                        int64
}

// Open starts a session of run runID: it opens the fleet on targets,
// runs preflight, starts the run's heartbeat and the session's background
// work. Nothing else is created until asked for.
func Open(ctx context.Context, runID string, cfg config.Fleet, ts []tasks.Task, targets []fleet.Target, opts Options) (*Session, error) {
	opts.LeaseTTL = cmpOr(opts.LeaseTTL, DefaultLeaseTTL)
	opts.WarmTTL = cmpOr(opts.WarmTTL, DefaultWarmTTL)
	opts.Heartbeat = cmpOr(opts.Heartbeat, heartbeat.DefaultDuration)
	f, err := fleet.Open(ctx, runID, cfg, nil, targets)
	if err != nil {
		return nil, err
	}
	if err := f.Preflight(ctx); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w\nNothing was created", err)
	}
	s := &Session{fleet: f, opts: opts, tasks: map[string]tasks.Task{}, seen: map[string]string{},
		pools: map[string]*pool{}, handles: map[string]*Handle{}, requests: map[string]*request{}, clients: map[string]time.Time{}, acquiring: map[string]int{}}
	if s.stopBeats, err = f.StartHeartbeats(ctx, "serve", opts.Heartbeat); err != nil {
		f.Close()
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, t := range ts {
		s.seen[t.ID] = t.Source
	}
	s.addChecked(ts)
	s.wg.Go(s.sweep)
	return s, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// RunID is the session's run id.
func (s *Session) RunID() string { return s.fleet.RunID }

// Fleet is the engine under the session.
func (s *Session) Fleet() *fleet.Fleet { return s.fleet }

// Options are the session's options, defaults filled in.
func (s *Session) Options() Options { return s.opts }

// AddTasks adds tasks to the plan; source names them in errors (e.g. "the
// request"). Tasks are checked as a task file's rows are, the config's
// rewrite rules applied; one bad task adds none.
func (s *Session) AddTasks(ts []tasks.Task, source string) (added []fleet.PoolChange, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("%w: no tasks to add", ErrInvalid)
	}
	seen := maps.Clone(s.seen)
	checked, err := tasks.Check(source, ts, seen, s.fleet.Config.Rewrite)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s.seen = seen
	return s.addChecked(checked), nil
}

// addChecked adds tasks checked already. Callers hold s.mu, or own s.
func (s *Session) addChecked(checked []tasks.Task) []fleet.PoolChange {
	if len(checked) == 0 {
		return nil
	}
	for _, t := range checked {
		s.tasks[t.ID] = t
	}
	changes := s.fleet.AddTasks(checked)
	for _, c := range changes {
		// A pool warm or warming now grows to its new size.
		if p := s.pools[c.Image]; p != nil && c.Replicas > c.Before {
			s.warmLocked(c.Image, p)
		}
	}
	return changes
}

// TaskCount is how many tasks the session holds.
func (s *Session) TaskCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tasks)
}

// imagesOf resolves task ids and images to the images of the plan.
// Callers hold s.mu.
func (s *Session) imagesOf(taskIDs, images []string) ([]string, error) {
	var out []string
	for _, id := range taskIDs {
		t, ok := s.tasks[id]
		if !ok {
			return nil, fmt.Errorf("%w: no task %q in this session: add it with AddTasks first", ErrNotFound, id)
		}
		out = append(out, t.Image)
	}
	for _, img := range images {
		if s.fleet.Planned(img) == 0 {
			return nil, fmt.Errorf("%w: no task of image %q in this session: add one with AddTasks first", ErrNotFound, img)
		}
		out = append(out, img)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Lookahead starts warming the pools of taskIDs' and images' images and
// returns at once.
func (s *Session) Lookahead(taskIDs, images []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	imgs, err := s.imagesOf(taskIDs, images)
	if err != nil {
		return nil, err
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("%w: name the tasks or images to warm", ErrInvalid)
	}
	for _, img := range imgs {
		s.want(img)
	}
	return imgs, nil
}

// want marks img as wanted now and warms its pool unless it is warm or
// warming. Callers hold s.mu.
func (s *Session) want(img string) *pool {
	p := s.pools[img]
	if p == nil {
		p = &pool{}
		s.pools[img] = p
	}
	p.lastWanted = time.Now()
	if p.warming == nil && (p.err != nil || !s.isWarm(img)) {
		s.warmLocked(img, p)
	}
	return p
}

func (s *Session) isWarm(img string) bool {
	st, err := s.fleet.PoolState(s.ctx, img)
	return err == nil && st.Replicas > 0
}

// warmLocked warms img's pool to its planned size in the background, or
// asks the warm in flight to go again. Callers hold s.mu.
func (s *Session) warmLocked(img string, p *pool) {
	if p.warming != nil {
		p.again = true
		return
	}
	p.warming, p.err = make(chan struct{}), nil
	done := p.warming
	s.wg.Go(func() {
		for {
			ctx, cancel := context.WithTimeout(s.ctx, s.fleet.Config.ReadyTimeout.Duration)
			want := s.fleet.Planned(img)
			err := s.fleet.Warm(ctx, []string{img}, func(string) int { return want })
			cancel()
			if err != nil && s.ctx.Err() == nil {
				klog.Warningf("giving up the pool of %s: %v", img, err)
				if uerr := s.fleet.Unwarm(context.WithoutCancel(s.ctx), []string{img}); uerr != nil {
					klog.Warningf("%v", uerr)
				}
			}
			s.mu.Lock()
			if p.again && err == nil {
				p.again = false
				s.mu.Unlock()
				continue
			}
			p.again, p.err, p.warming = false, err, nil
			close(done)
			s.mu.Unlock()
			return
		}
	})
}

// PoolStatus is an image's pool in the session.
type PoolStatus struct {
	fleet.PoolState
	Tasks, Desired int
	Err            error
	LastWanted     time.Time
}

// Pools lists the pools of images, or of every image of the plan when none
// is named, sorted by image.
func (s *Session) Pools(ctx context.Context, images []string) ([]PoolStatus, error) {
	s.mu.Lock()
	if len(images) == 0 {
		for _, p := range s.fleet.Plan.Pools {
			images = append(images, p.Image)
		}
	}
	tasksOf := map[string]int{}
	for _, p := range s.fleet.Plan.Pools {
		tasksOf[p.Image] = p.Tasks
	}
	out := make([]PoolStatus, 0, len(images))
	for _, img := range images {
		ps := PoolStatus{Tasks: tasksOf[img], Desired: s.fleet.Planned(img)}
		if p := s.pools[img]; p != nil {
			ps.Err, ps.LastWanted = p.err, p.lastWanted
		}
		out = append(out, ps)
	}
	s.mu.Unlock()
	for i, img := range images {
		st, err := s.fleet.PoolState(ctx, img)
		if err != nil {
			return nil, verdict.Infrastructure(verdict.API, err)
		}
		out[i].PoolState = st
	}
	slices.SortFunc(out, func(a, b PoolStatus) int { return strings.Compare(a.Image, b.Image) })
	return out, nil
}

// WaitPoolsReady waits until the pools of images (every pool the session
// warms when none is named) have all their sandboxes Ready, have been given
// up, or timeout passes. Not being ready is no error: the pools say how far
// they got.
func (s *Session) WaitPoolsReady(ctx context.Context, images []string, timeout time.Duration) (bool, []PoolStatus, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, nil, ErrClosed
	}
	var err error
	if len(images) > 0 {
		images, err = s.imagesOf(nil, images)
	} else {
		images = slices.Sorted(maps.Keys(s.pools))
		if len(images) == 0 {
			err = fmt.Errorf("%w: no pool is warming, so none would become ready: ask for them first with Lookahead (lookahead() in Python) or Acquire", ErrNotWarming)
		}
	}
	if err == nil {
		var cold []string
		for _, img := range images {
			if s.pools[img] == nil {
				cold = append(cold, img)
			}
		}
		if len(cold) > 0 {
			err = fmt.Errorf("%w: no pool is warming for %s, so it would not become ready: ask for it first with Lookahead (lookahead() in Python) or Acquire", ErrNotWarming, strings.Join(cold, ", "))
		}
	}
	s.mu.Unlock()
	if err != nil {
		return false, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		changed := s.fleet.Changed()
		pools, err := s.Pools(ctx, images)
		if err != nil {
			return false, nil, err
		}
		ready := true
		for _, p := range pools {
			if p.Err == nil && (!p.Warm || p.Ready < p.Desired) {
				ready = false
			}
		}
		if ready {
			return true, pools, nil
		}
		select {
		case <-ctx.Done():
			return false, pools, nil
		case <-changed:
		case <-time.After(time.Second):
			// A pool given up changes no object; look again.
		}
	}
}

// AcquireRequest says which sandbox to acquire, for whom.
type AcquireRequest struct {
	// RequestID makes Acquire idempotent; empty: every call is new.
	RequestID, ClientID string
	TaskID, Image       string
	Timeout             time.Duration
}

// Acquire claims a sandbox for r.TaskID's image (or r.Image), warming its
// pool if it is not warm, and leases it to r.ClientID. A retry with the
// same RequestID, while the first is in flight or after it returned,
// returns the first call's sandbox.
func (s *Session) Acquire(ctx context.Context, r AcquireRequest) (*Handle, error) {
	if r.ClientID == "" {
		return nil, fmt.Errorf("%w: a client id is required: sandboxes are leased to the client that acquires them", ErrInvalid)
	}
	if (r.TaskID == "") == (r.Image == "") {
		return nil, fmt.Errorf("%w: name either a task id or an image", ErrInvalid)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if req, ok := s.requests[r.RequestID]; ok && r.RequestID != "" {
		s.mu.Unlock()
		return s.retried(ctx, r, req)
	}
	var t tasks.Task
	if r.TaskID != "" {
		var ok bool
		if t, ok = s.tasks[r.TaskID]; !ok {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: no task %q in this session: add it with AddTasks first", ErrNotFound, r.TaskID)
		}
	} else {
		if s.fleet.Planned(r.Image) == 0 {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: no task of image %q in this session: add one with AddTasks first", ErrNotFound, r.Image)
		}
		t = tasks.Task{ID: r.RequestID, Image: r.Image}
	}
	req := &request{client: r.ClientID, what: r.TaskID + r.Image, done: make(chan struct{})}
	if r.RequestID != "" {
		s.requests[r.RequestID] = req
	}
	s.acquiring[t.Image]++
	s.renewLocked(r.ClientID)
	p := s.want(t.Image)
	s.mu.Unlock()

	// The claim goes on even if this call's client gives up waiting: its
	// retry takes the sandbox over.
	timeout := cmpOr(r.Timeout, s.fleet.Config.ReadyTimeout.Duration)
	actx, cancel := context.WithTimeout(s.ctx, timeout)
	h, err := s.acquire(actx, t, p)
	cancel()
	s.mu.Lock()
	req.handle, req.err = h, err
	close(req.done)
	s.acquiring[t.Image]--
	if err != nil {
		s.counts.Failed++
		delete(s.requests, r.RequestID) // a failed request may be retried afresh
	} else {
		s.counts.Acquired++
		if h.Resets > 0 {
			s.counts.Reused++
		}
		h.Client = r.ClientID
		s.handles[h.Claim] = h
		s.renewLocked(r.ClientID)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// The caller left; its retry will find the sandbox.
		return nil, context.Cause(ctx)
	}
	return h, nil
}

// retried serves a retry of an Acquire: the same client and sandbox, or an
// error saying why not.
func (s *Session) retried(ctx context.Context, r AcquireRequest, req *request) (*Handle, error) {
	if req.client != r.ClientID || req.what != r.TaskID+r.Image {
		return nil, fmt.Errorf("%w: request id %q was used for another acquire; use a new id per acquire", ErrInvalid, r.RequestID)
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if req.err != nil {
		return nil, req.err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.handle.released {
		return nil, fmt.Errorf("%w: the sandbox of request %q (%s) was released already", ErrNotFound, r.RequestID, req.handle.Claim)
	}
	s.renewLocked(r.ClientID)
	return req.handle, nil
}

// acquire takes a sandbox of t's image reset after an earlier lease, when
// the session recycles and one is kept; otherwise it waits for p's pool to
// exist with a Ready sandbox (or its warm to end), claims one and, when
// the session recycles, records what it is for its resets.
func (s *Session) acquire(ctx context.Context, t tasks.Task, p *pool) (*Handle, error) {
	if sb := s.fleet.TakeClean(t); sb != nil {
		return &Handle{Sandbox: sb, Image: t.Image}, nil
	}
	for {
		changed := s.fleet.Changed()
		s.mu.Lock()
		warming, werr := p.warming, p.err
		s.mu.Unlock()
		st, err := s.fleet.PoolState(ctx, t.Image)
		if err != nil {
			return nil, verdict.Infrastructure(verdict.API, err)
		}
		if warming == nil && werr != nil {
			return nil, verdict.Infrastructure(verdict.Start, fmt.Errorf("the pool of %s could not become ready: %w", t.Image, werr))
		}
		if st.Warm && (st.Ready > 0 || warming == nil) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, verdict.Infrastructure(verdict.Timeout, fmt.Errorf("waiting for a warm sandbox of %s: %w", t.Image, context.Cause(ctx)))
		case <-changed:
		case <-warming:
		}
	}
	sb, err := s.fleet.Acquire(ctx, t)
	if err != nil {
		return nil, verdict.Infrastructure(verdict.Reason(err), err)
	}
	s.fleet.Record(ctx, sb)
	return &Handle{Sandbox: sb, Image: t.Image}, nil
}

// renewLocked extends client's lease. Callers hold s.mu.
func (s *Session) renewLocked(client string) {
	s.clients[client] = time.Now().Add(s.opts.LeaseTTL)
}

// Renew extends client's lease and returns how many sandboxes it holds.
func (s *Session) Renew(client string) (int, error) {
	if client == "" {
		return 0, fmt.Errorf("%w: a client id is required", ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	s.renewLocked(client)
	n := 0
	for _, h := range s.handles {
		if h.Client == client {
			n++
		}
	}
	return n, nil
}

// LeaseExpiry is when client's lease runs out.
func (s *Session) LeaseExpiry(client string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clients[client]
}

// Handle returns the sandbox id names, if client holds it, and renews the
// client's lease.
func (s *Session) Handle(id, client string) (*Handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	h, ok := s.handles[id]
	switch {
	case id == "":
		return nil, fmt.Errorf("%w: a handle id is required", ErrInvalid)
	case !ok:
		return nil, fmt.Errorf("%w: no sandbox %q is held in this session (released, expired, or never acquired)", ErrNotFound, id)
	case h.Client != client:
		return nil, fmt.Errorf("%w: sandbox %q is leased to another client", ErrForeign, id)
	}
	s.renewLocked(client)
	return h, nil
}

// Release hands client's sandbox id back. It is deleted or, with reuse,
// reset and kept for the next Acquire of its image (fleet.GiveBack says
// what became of it); reuse needs a session that recycles.
func (s *Session) Release(ctx context.Context, id, client string, reuse bool) (fleet.Outcome, error) {
	if reuse && !s.fleet.Recycling() {
		return "", fmt.Errorf("%w: this session does not recycle sandboxes: start serve with --recycle (or recycle.enabled in its config) to release with reuse", ErrInvalid)
	}
	h, err := s.Handle(id, client)
	if err != nil {
		return "", err
	}
	return s.release(ctx, h, false, reuse)
}

func (s *Session) release(ctx context.Context, h *Handle, expired, reuse bool) (fleet.Outcome, error) {
	s.mu.Lock()
	if h.released {
		s.mu.Unlock()
		return fleet.Released, nil
	}
	h.released = true
	delete(s.handles, h.Claim)
	for id, r := range s.requests {
		if r.handle == h {
			delete(s.requests, id)
		}
	}
	s.counts.Released++
	if expired {
		s.counts.Expired++
	}
	s.mu.Unlock()
	// A client that stops waiting must not fail the reset under way; a
	// reset sandbox has no shell or process of its last lease left.
	h.tools.closeAll(context.WithoutCancel(ctx))
	outcome, err := s.fleet.GiveBack(context.WithoutCancel(ctx), h.Sandbox, reuse)
	if outcome == fleet.Quarantined {
		s.mu.Lock()
		s.counts.Quarantined++
		s.mu.Unlock()
	}
	return outcome, verdict.Infrastructure(verdict.API, err)
}

// Handles lists the sandboxes held now, by claim name.
func (s *Session) Handles() []*Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.handles))
	slices.SortFunc(out, func(a, b *Handle) int { return strings.Compare(a.Claim, b.Claim) })
	return out
}

// Counts returns the session's totals.
func (s *Session) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// sweep releases the sandboxes of clients whose lease ran out and removes
// pools nobody wanted for the warm TTL, until the session closes.
func (s *Session) sweep() {
	every := min(s.opts.LeaseTTL, s.opts.WarmTTL) / 4
	tick := time.NewTicker(max(every, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		s.mu.Lock()
		var expired []*Handle
		for _, h := range s.handles {
			if now.After(s.clients[h.Client]) {
				expired = append(expired, h)
			}
		}
		for c, until := range s.clients {
			if now.After(until) {
				delete(s.clients, c)
			}
		}
		held := map[string]bool{}
		for _, h := range s.handles {
			held[h.Image] = true
		}
		for img, n := range s.acquiring {
			held[img] = held[img] || n > 0
		}
		var cold []string
		for img, p := range s.pools {
			if p.warming == nil && !held[img] && now.Sub(p.lastWanted) > s.opts.WarmTTL {
				cold = append(cold, img)
				delete(s.pools, img)
			}
		}
		s.mu.Unlock()
		for _, h := range expired {
			klog.Infof("the lease of client %s ran out: releasing sandbox %s", h.Client, h.Claim)
			if _, err := s.release(s.ctx, h, true, false); err != nil {
				klog.Warningf("%v", err)
			}
		}
		if len(cold) > 0 {
			klog.Infof("no one asked for %s for %s: removing their pools", cold, s.opts.WarmTTL)
			if err := s.fleet.Unwarm(s.ctx, cold); err != nil {
				klog.Warningf("%v", err)
			}
		}
	}
}

// Close tears the session down: background work stops, every object of
// the run is deleted and waited for, and the heartbeat ends. It is safe to
// call more than once.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	held := slices.Collect(maps.Values(s.handles))
	s.mu.Unlock()
	for _, h := range held {
		h.tools.closeAll(ctx)
	}
	s.cancel()
	s.wg.Wait()
	err := s.fleet.Teardown(ctx)
	if err != nil {
		err = fmt.Errorf("tearing down run %s: %w (run `kubectl sandbox-fleet reap --run-id %s` to retry)", s.RunID(), err, s.RunID())
	}
	err = errors.Join(err, s.stopBeats(ctx))
	s.fleet.Close()
	return err
}
