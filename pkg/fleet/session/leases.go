package session

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

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
	if r.Timeout < 0 {
		return nil, fmt.Errorf("%w: timeout %s: must not be negative (0 is the session's ready timeout)", ErrInvalid, r.Timeout)
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
	timeout := cmpOr(r.Timeout, s.fleet.Config().ReadyTimeout.Duration)
	actx, cancel := context.WithTimeout(s.ctx, timeout)
	start := time.Now()
	h, err := s.acquire(actx, t, p, owned(r))
	cancel()
	s.observe(func(m *metrics.Metrics) { m.SessionAcquire(err == nil, howHad(h), time.Since(start)) })
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

// howHad says how h was had, for the metrics: warm, cold or reused.
func howHad(h *Handle) string {
	switch {
	case h == nil:
		return ""
	case h.Resets > 0:
		return "reused"
	case h.Warm:
		return "warm"
	}
	return "cold"
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
// The claim records owner, whom the sandbox is for (owned).
func (s *Session) acquire(ctx context.Context, t tasks.Task, p *pool, owner map[string]string) (*Handle, error) {
	if sb := s.fleet.TakeClean(t); sb != nil {
		err := sb.Annotate(ctx, pointers(owner))
		if err == nil {
			return &Handle{Sandbox: sb, Image: t.Image}, nil
		}
		// A sandbox its claim does not say is held would be lost by a
		// resume: release it and claim another.
		s.log.Error(err, "Releasing a sandbox its claim does not say is held", "sandbox", sb.Sandbox)
		if err := s.fleet.Release(ctx, sb); err != nil {
			s.log.Error(err, "Releasing a sandbox failed", "sandbox", sb.Sandbox)
		}
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
	sb, err := s.fleet.Acquire(ctx, t, owner)
	if err != nil {
		return nil, verdict.Infrastructure(verdict.Reason(err), err)
	}
	s.fleet.Record(ctx, sb)
	return &Handle{Sandbox: sb, Image: t.Image}, nil
}

// renewLocked extends client's lease. Callers hold s.mu.
func (s *Session) renewLocked(client string) {
	s.clients[client] = time.Now().Add(s.opts.LeaseTTL)
	s.changedLocked()
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

// Handle is a sandbox leased to a client.
type Handle struct {
	*fleet.Sandbox
	Image    string
	Client   string
	released bool
	// tools are its shells and processes, ended at its release.
	tools tools
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
	ctx = context.WithoutCancel(ctx)
	h.tools.closeAll(ctx)
	if reuse && s.fleet.Recycling() {
		// A sandbox kept for reuse is no longer the client's: a resume
		// must not give it back to it.
		if err := h.Annotate(ctx, disowned); err != nil {
			s.log.Error(err, "Releasing a sandbox rather than keeping it", "sandbox", h.Sandbox.Sandbox)
			reuse = false
		}
	}
	outcome, err := s.fleet.GiveBack(ctx, h.Sandbox, reuse)
	s.observe(func(m *metrics.Metrics) {
		counted := string(outcome)
		if expired && outcome == fleet.Released {
			counted = "expired"
		}
		m.SessionRelease(counted)
	})
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
