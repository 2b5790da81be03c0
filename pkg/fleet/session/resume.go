package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/heartbeat"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/sessionstate"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// ErrNoSession is a Resume of a run with no session to resume.
var ErrNoSession = sessionstate.ErrNone

// Resume takes over session runID, whose driver died (killed, OOM, its
// node lost or its Pod replaced), from what it recorded in the first of
// targets and what its objects say: its configuration, options, tasks and
// clients are read back, its pools kept as they are (none is warmed
// again), each Ready sandbox it held given back to its client while that
// client's lease runs and released when it ran out, and its heartbeat
// taken over. A driver still renewing the run's heartbeat is waited for.
// cfg, unless zero, must be the session's own configuration. Of opts,
// the TTLs and heartbeat are the session's own, as recorded; the rest
// applies.
func Resume(ctx context.Context, runID string, cfg config.Fleet, targets []fleet.Target, opts Options) (*Session, error) {
	home := targets[0]
	// The state is read once its driver is gone: until then it may still
	// change it, or close the session.
	if err := heartbeat.WaitAbandoned(ctx, home.Clients.Kube, home.Clients.Namespace, runID); err != nil {
		return nil, err
	}
	store := &sessionstate.Store{Client: home.Clients.Client, Namespace: home.Clients.Namespace, RunID: runID}
	st, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	if err := sameConfig(cfg, st.Config); err != nil {
		return nil, err
	}
	opts.LeaseTTL, opts.WarmTTL, opts.Heartbeat = st.Options.LeaseTTL.Duration, st.Options.WarmTTL.Duration, st.Options.Heartbeat.Duration
	s, err := open(ctx, runID, st.Config, targets, opts)
	if err != nil {
		return nil, err
	}
	for _, t := range st.Tasks {
		s.seen[t.ID] = "the session's recorded tasks"
	}
	s.addChecked(st.Tasks)
	s.owner = st.Clients.Owner
	for id, c := range st.Clients.Clients {
		s.keys[id] = c.KeySHA256
		s.clients[id] = c.Expires
	}
	adopted, err := s.fleet.Adopt(ctx)
	if err != nil {
		// Nothing was changed but claims that were not Ready: the session
		// can be resumed again, or reaped.
		s.fleet.Close()
		return nil, errors.Join(fmt.Errorf("resuming session %s: %w", runID, err), s.beats.Let(ctx))
	}
	s.readopt(ctx, adopted)
	s.start()
	return s, nil
}

// readopt makes the adopted pools the session's and gives each adopted
// sandbox back to its client, or releases it when the client's lease ran
// out or it was not held (a reset sandbox kept for reuse: what it was
// reset to is not known to this process).
func (s *Session) readopt(ctx context.Context, a fleet.Adopted) {
	now := time.Now()
	for _, img := range a.Images {
		s.pools[img] = &pool{lastWanted: now}
	}
	var gone []*Handle
	for _, sb := range a.Sandboxes {
		h := &Handle{Sandbox: sb.Sandbox, Image: sb.Image, Client: sb.Annotations[labels.Client]}
		if h.Client == "" || !now.Before(s.clients[h.Client]) {
			gone = append(gone, h)
			continue
		}
		s.handles[h.Claim] = h
		if rid := sb.Annotations[labels.RequestID]; rid != "" {
			done := make(chan struct{})
			close(done)
			s.requests[rid] = &request{client: h.Client, what: h.TaskID, done: done, handle: h}
			if img := sb.Annotations[labels.AcquiredImage]; img != "" {
				s.requests[rid].what = img
			}
		}
	}
	s.log.Info("Resumed the session", "run", s.RunID(), "poolsKept", len(a.Images), "sandboxesHeld", len(s.handles),
		"released", len(gone), "claimsUnderWayDeleted", len(a.Dropped))
	s.stopStrays(ctx)
	for _, h := range gone {
		if _, err := s.release(ctx, h, h.Client != "", false); err != nil {
			s.log.Error(err, "Releasing a sandbox failed", "sandbox", h.Claim)
		}
	}
}

// stopStrays stops in each sandbox given back what the dead driver left
// running there — its shells, processes and the execs in flight when it
// died, which no stream leads to any more — before any client can call,
// and marks the handles so that a call naming one of those is told it
// ended with the driver. A sandbox where that fails is kept, with a log
// line: its client may still use it.
func (s *Session) stopStrays(ctx context.Context) {
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	prefix := "r" + hex.EncodeToString(suffix[:]) + "-"
	var wg sync.WaitGroup
	limit := make(chan struct{}, 16)
	for _, h := range s.handles {
		h.tools.resumed, h.tools.prefix = true, prefix
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			n, err := h.Sandbox.StopStrays(ctx)
			switch {
			case err != nil:
				s.log.Error(err, "Stopping what the previous serve left running failed; the sandbox is kept", "sandbox", h.Claim)
			case n > 0:
				s.log.Info("Stopped the commands the previous serve left running", "sandbox", h.Claim, "commands", n)
			}
		})
	}
	wg.Wait()
}

// sameConfig checks that given, unless zero, is the session's recorded
// configuration: a resumed session keeps its pools, made from it.
func sameConfig(given, recorded config.Fleet) error {
	g, err := json.Marshal(given)
	if err != nil {
		return err
	}
	zero, _ := json.Marshal(config.Fleet{})
	r, err := json.Marshal(recorded)
	if err != nil {
		return err
	}
	if string(g) == string(zero) || string(g) == string(r) {
		return nil
	}
	return fmt.Errorf("%w: the configuration given is not the session's own: its pools were made from that one; resume without -f and configuration flags, or with the very same", ErrInvalid)
}

// Admit binds client id to key on its first call, and refuses a call
// whose key is not the one bound: no caller can act on another's
// sandboxes. An id whose holder is gone — its lease ran out and it holds
// no sandbox — is bound to the new key instead, so that a trainer
// restarted with a fixed client id gets it back. The first client
// admitted owns the session.
func (s *Session) Admit(id, key string) error {
	if id == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(key))
	digest := hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	bound, ok := s.keys[id]
	if !ok {
		s.keys[id] = digest
		if s.owner == "" {
			s.owner = id
		}
		s.changedLocked()
		return nil
	}
	if subtle.ConstantTimeCompare([]byte(bound), []byte(digest)) == 1 {
		return nil
	}
	if time.Now().Before(s.clients[id]) || s.holdsLocked(id) {
		return fmt.Errorf("%w: client id %q belongs to another caller (its key differs) that holds a lease or a sandbox: use a client id of your own, or wait until its lease runs out", ErrForeign, id)
	}
	s.keys[id] = digest
	s.changedLocked()
	return nil
}

// holdsLocked says whether client id holds a sandbox. Callers hold s.mu.
func (s *Session) holdsLocked(id string) bool {
	for _, h := range s.handles {
		if h.Client == id {
			return true
		}
	}
	return false
}

// MayClose refuses a Close by any client but the owner.
func (s *Session) MayClose(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owner != "" && id != s.owner {
		return fmt.Errorf("%w: only the session's owner (client %q, the first to call it) may close it: release your sandboxes, or stop serve", ErrForeign, s.owner)
	}
	return nil
}

// changedLocked asks recordClients to record the clients. Callers hold
// s.mu.
func (s *Session) changedLocked() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// recordEvery spaces the records of the clients: a lease renewed on every
// call is recorded at most this late.
const recordEvery = time.Second

// recordClients records the clients' keys and leases whenever they
// change, at most once per recordEvery, until the session closes.
func (s *Session) recordClients() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.dirty:
		}
		s.mu.Lock()
		cs := sessionstate.Clients{Owner: s.owner, Clients: map[string]sessionstate.Client{}}
		for id, key := range s.keys {
			cs.Clients[id] = sessionstate.Client{KeySHA256: key, Expires: s.clients[id]}
		}
		s.mu.Unlock()
		if err := s.store.SaveClients(s.ctx, cs); err != nil && s.ctx.Err() == nil {
			s.log.Error(err, "Recording the session's clients failed; trying again")
			s.mu.Lock()
			s.changedLocked()
			s.mu.Unlock()
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(recordEvery):
		}
	}
}

// owned is the annotations that record on a claim whom it is held for.
func owned(r AcquireRequest) map[string]string {
	a := map[string]string{labels.Client: r.ClientID}
	if r.RequestID != "" {
		a[labels.RequestID] = r.RequestID
	}
	if r.Image != "" {
		a[labels.AcquiredImage] = r.Image
	}
	return a
}

// disowned removes what owned recorded.
var disowned = map[string]*string{labels.Client: nil, labels.RequestID: nil, labels.AcquiredImage: nil}

// pointers turns owned's annotations into a patch's.
func pointers(a map[string]string) map[string]*string {
	out := maps.Clone(disowned)
	for k, v := range a {
		out[k] = &v
	}
	return out
}
