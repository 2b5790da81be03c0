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
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/heartbeat"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/sessionstate"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
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
	// Metrics, when set, receive the session's figures and the engine's.
	Metrics *metrics.Metrics
	// Prepull has the nodes pull the images of tasks as they are added
	// (fleet.PrepullImages), for nodes whose image filesystem is less than
	// PrepullHighWater percent full (0: nodecache.DefaultHighWaterPercent).
	Prepull          bool
	PrepullHighWater int32
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
	// beats are the run's heartbeats.
	beats *fleet.Heartbeats
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
	// keys are the hex SHA-256 digests of the clients' keys, by client id
	// (Admit); owner is the first client, the only one that may Close.
	keys  map[string]string
	owner string

	// store records in the cluster what a resumed session needs (package
	// sessionstate); dirty asks recordClients to record the clients.
	store *sessionstate.Store
	dirty chan struct{}
	// adding serializes AddTasks: a task counts once it is recorded.
	adding sync.Mutex

	// log is the logger of the context Open was given, the engine's too.
	log logr.Logger
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

// Counts are the session's totals. Reused counts the acquires served by a
// sandbox reset after an earlier lease, Quarantined the sandboxes deleted
// because their reset failed.
type Counts struct {
	Acquired, Released, Expired, Failed, Execs int64
	Reused, Quarantined                        int64
}

// Open starts a session of run runID: it opens the fleet on targets,
// runs preflight, starts the run's heartbeat, records the session in the
// cluster (package sessionstate; Resume reads it) and starts the
// session's background work. Nothing else is created until asked for.
func Open(ctx context.Context, runID string, cfg config.Fleet, ts []tasks.Task, targets []fleet.Target, opts Options) (*Session, error) {
	opts.LeaseTTL = cmpOr(opts.LeaseTTL, DefaultLeaseTTL)
	opts.WarmTTL = cmpOr(opts.WarmTTL, DefaultWarmTTL)
	opts.Heartbeat = cmpOr(opts.Heartbeat, heartbeat.DefaultDuration)
	if opts.Prepull {
		opts.PrepullHighWater = cmp.Or(opts.PrepullHighWater, nodecache.DefaultHighWaterPercent)
		if err := nodecache.CheckHighWater(opts.PrepullHighWater); err != nil {
			return nil, fmt.Errorf("%w: the prepull high-water mark %w", ErrInvalid, err)
		}
	}
	s, err := open(ctx, runID, cfg, targets, opts)
	if err != nil {
		return nil, err
	}
	if err := s.store.Create(ctx, cfg, recorded(opts), ts); err != nil {
		s.fleet.Close()
		return nil, errors.Join(err, s.beats.Stop(context.WithoutCancel(ctx)))
	}
	for _, t := range ts {
		s.seen[t.ID] = t.Source
	}
	s.prepull(s.addChecked(ts))
	s.start()
	return s, nil
}

// open opens the fleet of a session and starts it: preflight and the
// run's heartbeat.
func open(ctx context.Context, runID string, cfg config.Fleet, targets []fleet.Target, opts Options) (*Session, error) {
	f, err := fleet.Open(ctx, runID, cfg, nil, targets, fleet.ForSession(), fleet.WithHeartbeat("serve", opts.Heartbeat), fleet.WithMetrics(opts.Metrics))
	if err != nil {
		return nil, err
	}
	beats, err := f.Start(ctx)
	if err != nil {
		f.Close()
		return nil, err
	}
	home := f.Clusters()[0]
	s := &Session{fleet: f, beats: beats, opts: opts, log: klog.FromContext(ctx), tasks: map[string]tasks.Task{}, seen: map[string]string{},
		pools: map[string]*pool{}, handles: map[string]*Handle{}, requests: map[string]*request{}, clients: map[string]time.Time{},
		acquiring: map[string]int{}, keys: map[string]string{}, dirty: make(chan struct{}, 1),
		store: &sessionstate.Store{Client: home.Clients.Client, Namespace: home.Namespace(), RunID: runID}}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if m := opts.Metrics; m != nil {
		m.SessionGauges(s.liveClients, func() int { return len(s.Handles()) }, s.poolCount)
	}
	return s, nil
}

func (s *Session) liveClients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, n := time.Now(), 0
	for _, until := range s.clients {
		if now.Before(until) {
			n++
		}
	}
	return n
}

func (s *Session) poolCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pools)
}

// observe hands the session's metrics, if any, to record.
func (s *Session) observe(record func(*metrics.Metrics)) {
	if m := s.opts.Metrics; m != nil {
		record(m)
	}
}

// start starts the session's background work.
func (s *Session) start() {
	s.wg.Go(s.sweep)
	s.wg.Go(s.recordClients)
}

func recorded(o Options) sessionstate.Options {
	return sessionstate.Options{LeaseTTL: metav1.Duration{Duration: o.LeaseTTL}, WarmTTL: metav1.Duration{Duration: o.WarmTTL},
		Heartbeat: metav1.Duration{Duration: o.Heartbeat}}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// RunID is the session's run id.
func (s *Session) RunID() string { return s.fleet.RunID() }

// Fleet is the engine under the session.
func (s *Session) Fleet() *fleet.Fleet { return s.fleet }

// Options are the session's options, defaults filled in.
func (s *Session) Options() Options { return s.opts }

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
		held := s.heldLocked()
		var cold []string
		for img, p := range s.pools {
			if p.warming == nil && !held[img] && now.Sub(p.lastWanted) > s.opts.WarmTTL {
				cold = append(cold, img)
				delete(s.pools, img)
			}
		}
		s.mu.Unlock()
		for _, h := range expired {
			s.log.Info("A client's lease ran out: releasing its sandbox", "client", h.Client, "sandbox", h.Claim)
			if _, err := s.release(s.ctx, h, true, false); err != nil {
				s.log.Error(err, "Releasing a sandbox failed", "sandbox", h.Claim)
			}
		}
		if len(cold) > 0 {
			s.log.Info("No one asked for these images for the warm TTL: removing their pools", "images", cold, "warmTTL", s.opts.WarmTTL)
			if err := s.fleet.Unwarm(s.ctx, cold); err != nil {
				s.log.Error(err, "Removing pools failed", "images", cold)
			}
		}
	}
}

// heldLocked is the images the session holds a sandbox of or is
// acquiring one of: their pools stay. Callers hold s.mu.
func (s *Session) heldLocked() map[string]bool {
	held := map[string]bool{}
	for _, h := range s.handles {
		held[h.Image] = true
	}
	for img, n := range s.acquiring {
		held[img] = held[img] || n > 0
	}
	return held
}

// Unwarm removes the pools of images now, as the warm TTL would once no one
// asked for them: a managed run's window that is done, or its end. A pool
// the session holds or is acquiring a sandbox of, or is warming, stays.
// It returns the images whose pools were removed.
func (s *Session) Unwarm(ctx context.Context, images []string) ([]string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	held := s.heldLocked()
	var cold []string
	for _, img := range images {
		if p := s.pools[img]; p != nil && p.warming == nil && !held[img] {
			cold = append(cold, img)
			delete(s.pools, img)
		}
	}
	s.mu.Unlock()
	if len(cold) == 0 {
		return nil, nil
	}
	return cold, s.fleet.Unwarm(ctx, cold)
}

// Close tears the session down: background work stops, every object of
// the run is deleted and waited for, and the heartbeat ends. It is safe to
// call more than once.
func (s *Session) Close(ctx context.Context) error {
	if !s.stop(ctx) {
		return nil
	}
	err := s.fleet.Teardown(ctx)
	if err != nil {
		err = &fleet.TeardownError{RunID: s.RunID(), Err: err}
	} else {
		// What a resume would need goes only with the run: a session
		// whose teardown failed can still be resumed, or reaped.
		err = s.store.Delete(ctx)
	}
	if s.opts.Prepull {
		err = errors.Join(err, s.fleet.Unprepull(ctx))
	}
	err = errors.Join(err, s.beats.Stop(ctx))
	s.fleet.Close()
	return err
}

// Detach leaves the session as it is in the cluster — pools, held
// sandboxes, what it recorded — for a resumed session to take over at
// once (Resume): its background work stops and its heartbeat lets the
// run go. Commands running in its sandboxes are ended. serve detaches
// when its Pod is replaced.
func (s *Session) Detach(ctx context.Context) error {
	if !s.stop(ctx) {
		return nil
	}
	err := s.beats.Let(ctx)
	s.fleet.Close()
	return err
}

// stop closes the session to calls, ends the commands running in its
// sandboxes and its background work. It reports false when it was
// closed already.
func (s *Session) stop(ctx context.Context) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	held := slices.Collect(maps.Values(s.handles))
	s.mu.Unlock()
	for _, h := range held {
		h.tools.closeAll(ctx)
	}
	s.cancel()
	s.wg.Wait()
	return true
}
