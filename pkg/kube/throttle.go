package kube

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// Limits are a client's client-side rate limits: QPS requests a second on
// average, Burst at once. Zero fields take the defaults.
type Limits struct {
	QPS   float32
	Burst int
}

// Defaults that let a run of a thousand concurrent claims create them all
// at once and keep up with a thousand a second after: a claim costs a
// create and a delete, a task a few requests more, and reads come from
// watches. The API server's priority and fairness, not this client,
// protects the control plane; client-go's 5 QPS / 10 burst would make a
// thousand claims wait minutes for each other.
const (
	DefaultQPS   = 500
	DefaultBurst = 1000
)

func (l Limits) orDefaults() Limits {
	if l.QPS == 0 {
		l.QPS = DefaultQPS
	}
	if l.Burst == 0 {
		l.Burst = DefaultBurst
	}
	return l
}

// delayedAfter is how long a wait for the rate limiter must be to count as
// throttling; client-go logs waits from the same length on.
const delayedAfter = 50 * time.Millisecond

// Throttle is the token bucket every client of one Clients shares, which
// keeps count of how much it delayed requests, so that a run can say when
// its own rate limits, not the API server, held it back.
type Throttle struct {
	flowcontrol.RateLimiter
	mu      sync.Mutex
	delayed Delay
}

// Delay says how many requests the client-side rate limiter delayed by
// more than 50 ms, for how long in all and at most.
type Delay struct {
	Requests int
	Total    time.Duration
	Max      time.Duration
}

func newThrottle(l Limits) *Throttle {
	return &Throttle{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(l.QPS, l.Burst)}
}

// Accept takes a token, waiting for one if need be.
func (t *Throttle) Accept() {
	start := time.Now()
	t.RateLimiter.Accept()
	t.record(time.Since(start))
}

// Wait takes a token unless ctx ends first.
func (t *Throttle) Wait(ctx context.Context) error {
	start := time.Now()
	err := t.RateLimiter.Wait(ctx)
	t.record(time.Since(start))
	return err
}

func (t *Throttle) record(d time.Duration) {
	if d < delayedAfter {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.delayed.Requests++
	t.delayed.Total += d
	t.delayed.Max = max(t.delayed.Max, d)
}

// Delayed returns what the rate limiter delayed so far.
func (t *Throttle) Delayed() Delay {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.delayed
}
