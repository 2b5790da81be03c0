package agent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Agent keeps one node's NodeImageCache current, and pulls the images of
// the PrepullJobs that select its node. It reads the runtime at
// start, soon after each change of its images, and every Resync, and
// writes the object when what it shows changed (or at Resync, which
// refreshes its observed time). It never exits on a runtime or API error:
// it says so in the object's conditions and retries with backoff, so a
// broken runtime shows in the cluster instead of as a crash loop.
type Agent struct {
	// Node is the node's name, and the object's.
	Node    string
	Runtime *Runtime
	Client  *Client
	// Version is written to the object's agentVersion.
	Version string
	// Resync is how often the runtime is read and the object written
	// even when no change was seen.
	Resync time.Duration
	// Settle is how long the agent waits after a change for more before
	// it reads: one pull sends several events.
	Settle time.Duration
	// MinWriteInterval is the least time between two writes of changes:
	// each write sends the whole object (up to a MiB), so a burst of
	// changes — a PrepullJob pulling many images — is gathered into one
	// write per interval, while a change after a quiet spell is written
	// after Settle.
	MinWriteInterval time.Duration
	// Poll is how often a runtime without containerd's event stream is
	// polled for changes.
	Poll time.Duration
	// PullInterval is how often the agent looks at the layers the
	// runtime is fetching and, when they moved, patches them into the
	// object's pulls (a small patch, not the whole object); 0 is never.
	PullInterval time.Duration
	// StateDir is a directory on the node the agent keeps across
	// restarts: what it pulled for deleteWhenDone jobs, to remove it even
	// if it restarted before the job was deleted. Empty keeps nothing.
	StateDir string
	// Limits bound what PrepullJobs make the node pull: the registries
	// allowed (none: nothing) and a cap on their disk high-water mark.
	Limits nodecache.PullLimits
	// MaxObjectBytes bounds the object's size (MaxObjectBytes if zero).
	MaxObjectBytes int
	Log            logr.Logger
}

// retryBackoff paces retries after a failed read, write or watch.
func retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 7, Cap: time.Minute}
}

// Run keeps the object current until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	owner, err := a.nodeOwner(ctx)
	if err != nil {
		return err
	}
	// The watch and the jobs end with ctx; Run returns after them, so
	// its caller may close the runtime.
	var wg sync.WaitGroup
	defer wg.Wait()
	changes := make(chan struct{}, 1)
	wg.Go(func() { a.watch(ctx, changes) })
	wg.Go(func() { a.runJobs(ctx) })

	state := &published{cache: &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: a.Node, OwnerReferences: []metav1.OwnerReference{owner}}}}
	backoff := retryBackoff()
	var pullTicks <-chan time.Time
	if a.PullInterval > 0 {
		ticker := time.NewTicker(a.PullInterval)
		defer ticker.Stop()
		pullTicks = ticker.C
	}
	for {
		failed, err := a.refresh(ctx, state)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.Log.Error(err, "Writing the NodeImageCache")
		}
		next := a.Resync
		if failed || err != nil {
			next = backoff.Step()
		} else {
			backoff = retryBackoff()
		}
		if !a.wait(ctx, next, changes, pullTicks, state) {
			return nil
		}
	}
}

// wait returns true after d, or after a change of the runtime's images
// has settled (NextRead), reporting the pulls in progress at each tick of
// pullTicks meanwhile; false once ctx ends. The refresh's writes and the
// pulls' patches take turns in this one loop, so each starts from the
// other's resourceVersion.
func (a *Agent) wait(ctx context.Context, d time.Duration, changes <-chan struct{}, pullTicks <-chan time.Time, state *published) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	settling := false
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-changes:
			// Changes that come while settling are in the read after it.
			if !settling {
				settling = true
				timer.Reset(NextRead(a.Settle, a.MinWriteInterval, state.at, time.Now()))
			}
		case <-pullTicks:
			if err := a.reportPulls(ctx, state.cache, &state.pulls); err != nil && ctx.Err() == nil {
				a.Log.Error(err, "Writing the node's pulls in progress")
			}
		}
	}
}

// reportPulls reads the layers the runtime is fetching and patches them
// (with those that finished meanwhile, see pullTracker) into the object
// when they differ from what it shows.
func (a *Agent) reportPulls(ctx context.Context, cache *v1alpha1.NodeImageCache, tracker *pullTracker) error {
	current, err := a.Runtime.Pulls(ctx)
	if err != nil {
		return err
	}
	pulls := tracker.look(current, time.Now())
	if cache.ResourceVersion == "" || slices.Equal(pulls, cache.Pulls) {
		// Until the object is first written there is nothing to patch;
		// that write carries the pulls of the next look.
		return err
	}
	return a.Client.patchPulls(ctx, cache, pulls)
}

// NextRead is how long after a change at now the agent reads and writes:
// after settle, and no sooner than minInterval after its last write.
func NextRead(settle, minInterval time.Duration, lastWrite, now time.Time) time.Duration {
	return max(settle, lastWrite.Add(minInterval).Sub(now))
}

// published is what the agent last wrote.
type published struct {
	// cache is the object without its images and layers: the server has
	// them, and holding them between reads would double the agent's
	// memory.
	cache *v1alpha1.NodeImageCache
	// hash is the content hash of the last write, at time at.
	hash [sha256.Size]byte
	at   time.Time
	// pulls follows the layers fetching between looks.
	pulls pullTracker
}

// refresh reads the runtime and writes what changed since the last write.
// It reports whether the read failed, and the write's error.
func (a *Agent) refresh(ctx context.Context, last *published) (bool, error) {
	cache := last.cache
	cache.AgentVersion = a.Version
	maxBytes := a.MaxObjectBytes
	if maxBytes == 0 {
		maxBytes = nodecache.MaxObjectBytes
	}
	snap, readErr := a.Runtime.Read(ctx)
	now := time.Now()
	if readErr != nil {
		a.Log.Error(readErr, "Reading the runtime")
		nodecache.Unreachable(cache, readErr, now)
		content := contentHash(cache)
		if content == last.hash {
			return true, nil
		}
		// Only the conditions: what the last read found stays on the server.
		if err := a.Client.patchConditions(ctx, cache); err != nil {
			return true, err
		}
		last.hash = content
		return true, nil
	}
	nodecache.Observe(cache, snap, now, maxBytes)
	defer func() {
		cache.Layers, cache.Images = nil, nil
		// A read of a node with thousands of images takes several MiB
		// for a moment; the agent runs on every node and idles between
		// reads, so it hands that memory back now rather than over the
		// Go runtime's next minutes.
		debug.FreeOSMemory()
	}()
	content := contentHash(cache)
	if content != last.hash || now.Sub(last.at) >= a.Resync {
		if err := a.write(ctx, cache); err != nil {
			return false, err
		}
		last.hash, last.at = content, now
		a.Log.V(1).Info("Wrote the NodeImageCache", "images", cache.ImageCount, "layers", cache.LayerCount)
	}
	return false, nil
}

// nodeOwner is the owner reference to the agent's Node. It waits for the
// Node: an agent can start before its node is registered.
func (a *Agent) nodeOwner(ctx context.Context) (metav1.OwnerReference, error) {
	backoff := retryBackoff()
	for {
		node, err := a.Client.node(ctx, a.Node)
		if err == nil {
			return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: a.Node, UID: node.UID}, nil
		}
		a.Log.Error(err, "Reading the agent's Node; is --node-name (the downward API's spec.nodeName) right?", "node", a.Node)
		if !sleep(ctx, backoff.Step()) {
			return metav1.OwnerReference{}, fmt.Errorf("reading Node %s: %w", a.Node, err)
		}
	}
}

// watch signals changes of the runtime's images until ctx ends,
// restarting the runtime's watch with backoff when it fails.
func (a *Agent) watch(ctx context.Context, changes chan<- struct{}) {
	notify := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	backoff := retryBackoff()
	for {
		started := time.Now()
		err := a.Runtime.Watch(ctx, a.Poll, notify)
		if ctx.Err() != nil {
			return
		}
		a.Log.Error(err, "Following the runtime's image changes")
		// Changes may have been missed while the watch was down.
		notify()
		if time.Since(started) > time.Minute {
			backoff = retryBackoff()
		}
		if !sleep(ctx, backoff.Step()) {
			return
		}
	}
}

// write creates or updates the object.
func (a *Agent) write(ctx context.Context, cache *v1alpha1.NodeImageCache) error {
	if cache.ResourceVersion == "" {
		err := a.Client.create(ctx, cache)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	} else {
		err := a.Client.update(ctx, cache)
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
	}
	// Someone else changed or removed the object (another writer, or the
	// garbage collector with an old Node): start again from the server's.
	rv, err := a.Client.resourceVersion(ctx, cache.Name)
	switch {
	case apierrors.IsNotFound(err):
		cache.ResourceVersion = ""
		return a.Client.create(ctx, cache)
	case err != nil:
		return err
	}
	cache.ResourceVersion = rv
	return a.Client.update(ctx, cache)
}

// contentHash is a hash of what the object shows, apart from its
// metadata, when it was observed and its pulls.
func contentHash(cache *v1alpha1.NodeImageCache) [sha256.Size]byte {
	content := *cache
	// Pulls are written by their own patches.
	content.ObjectMeta, content.ObservedTime, content.Pulls = metav1.ObjectMeta{}, metav1.Time{}, nil
	h := sha256.New()
	// Writing to a hash cannot fail.
	_ = nodecache.Encode(h, &content)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
