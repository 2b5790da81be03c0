// Package registry reads an image's layers from its registry, for images
// no node holds yet: their compressed digests and sizes, as a
// NodeImageCache lists layers, so what a node lacks of them can be counted.
package registry

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Layers reads images' layers from their registries and keeps what it
// read: a manifest is fetched once per reference while it stays among
// the cacheSize most recently used, so a tag moved to another image is not
// seen until it drops out or the process restarts (task images are not
// retagged).
type Layers struct {
	// Platform is the nodes' platform, whose manifest an index resolves
	// to (linux/amd64 if empty).
	Platform v1.Platform
	// Keychain gives registry credentials (the docker config's if nil).
	Keychain authn.Keychain
	// Failed, if set, hears of each of Known's reads that failed.
	Failed func(ref string, err error)

	mu    sync.Mutex
	cache lru[[]v1alpha1.Layer]
	// failed holds when each reference that failed to read may be tried
	// again.
	failed lru[time.Time]
	// queued are the references waiting for, or being read by, one of
	// the knownReads readers, which take them from queue.
	queued map[string]bool
	queue  chan string
}

// Known's reads: how many at once, how many may wait, how long each may
// take, how long after a failure the image is read again, and how many
// images' layers and failures are kept. A reference is the caller's
// choice — a tenant's Pod names any image it likes — so none of it may
// grow without bound: past the queue a reference is not read, only asked
// for again later, and the oldest entries make way for new ones.
const (
	knownReads      = 4
	knownQueue      = 256
	knownTimeout    = 30 * time.Second
	knownRetryAfter = 5 * time.Minute
	cacheSize       = 4096
)

// Known returns the layers of image ref if they have been read, without
// waiting: otherwise it queues ref for a reader (unless it is queued
// already, failed within the last five minutes, or the queue is full) and
// reports false. A scheduler's or an admission webhook's hot path takes
// the image as unknown until then.
func (l *Layers) Known(ref string) ([]v1alpha1.Layer, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if layers, ok := l.cache.get(ref); ok {
		return layers, true
	}
	if again, ok := l.failed.get(ref); l.queued[ref] || ok && time.Now().Before(again) {
		return nil, false
	}
	if l.queue == nil {
		l.queued, l.queue = map[string]bool{}, make(chan string, knownQueue)
		for range knownReads {
			go l.reader()
		}
	}
	select {
	case l.queue <- ref:
		l.queued[ref] = true
	default:
	}
	return nil, false
}

// Cached returns the layers of image ref if they have been read, and
// never reads.
func (l *Layers) Cached(ref string) ([]v1alpha1.Layer, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cache.get(ref)
}

// Pending is how many references wait for or are being read by Known's
// readers.
func (l *Layers) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queued)
}

// reader reads the references Known queues, for as long as the process
// runs: there are knownReads of them.
func (l *Layers) reader() {
	for ref := range l.queue {
		ctx, cancel := context.WithTimeout(context.Background(), knownTimeout)
		_, err := l.Get(ctx, ref)
		cancel()
		l.mu.Lock()
		delete(l.queued, ref)
		if err != nil {
			l.failed.put(ref, time.Now().Add(knownRetryAfter))
		}
		failed := l.Failed
		l.mu.Unlock()
		if err != nil && failed != nil {
			failed(ref, err)
		}
	}
}

// lru is a map of at most cacheSize entries that drops the least recently
// used when full. Its zero value is empty; its user locks it.
type lru[V any] struct {
	entries map[string]*list.Element
	order   list.List // of *lruEntry[V], most recently used first
}

type lruEntry[V any] struct {
	key   string
	value V
}

func (c *lru[V]) get(key string) (V, bool) {
	e, ok := c.entries[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry[V]).value, true
}

func (c *lru[V]) put(key string, value V) {
	if e, ok := c.entries[key]; ok {
		e.Value.(*lruEntry[V]).value = value
		c.order.MoveToFront(e)
		return
	}
	if c.entries == nil {
		c.entries = map[string]*list.Element{}
	}
	c.entries[key] = c.order.PushFront(&lruEntry[V]{key, value})
	if c.order.Len() > cacheSize {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*lruEntry[V]).key)
	}
}

func (c *lru[V]) len() int { return c.order.Len() }

// Read is what GetAll read: the layers of the images read, an error for
// each that could not be, and the images not read at all.
type Read struct {
	Found  map[string][]v1alpha1.Layer
	Failed []error
	// Skipped were not read: ctx ended first, or their registry had let
	// another read time out, so that one registry that does not answer
	// costs one timeout, not one per image.
	Skipped []string
}

// GetAll reads the layers of images, eight at a time, each read bounded by
// timeout and all of them by ctx, for a command that waits for them.
// Failures and skips are in the images' order.
func (l *Layers) GetAll(ctx context.Context, images []string, timeout time.Duration) Read {
	const reads = 8
	layers := make([][]v1alpha1.Layer, len(images))
	errs := make([]error, len(images))
	skipped := make([]bool, len(images))
	var mu sync.Mutex
	silent := map[string]bool{} // registries a read timed out on
	var wg sync.WaitGroup
	slots := make(chan struct{}, reads)
	for i, img := range images {
		host := registryOf(img)
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				skipped[i] = true
				return
			}
			defer func() { <-slots }()
			mu.Lock()
			skip := silent[host] || ctx.Err() != nil
			mu.Unlock()
			if skip {
				skipped[i] = true
				return
			}
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			layers[i], errs[i] = l.Get(rctx, img)
			if errs[i] != nil && ctx.Err() == nil && rctx.Err() != nil {
				mu.Lock()
				silent[host] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r := Read{Found: map[string][]v1alpha1.Layer{}}
	for i, img := range images {
		switch {
		case skipped[i]:
			r.Skipped = append(r.Skipped, img)
		case errs[i] != nil:
			r.Failed = append(r.Failed, errs[i])
		default:
			r.Found[img] = layers[i]
		}
	}
	return r
}

// registryOf is the registry host of image ref, or ref itself when it
// does not parse (its read then fails on its own).
func registryOf(ref string) string {
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return ref
	}
	return parsed.Context().RegistryStr()
}

// Get returns the layers of image ref, base first.
func (l *Layers) Get(ctx context.Context, ref string) ([]v1alpha1.Layer, error) {
	if layers, ok := l.Cached(ref); ok {
		return layers, nil
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, err)
	}
	platform := l.Platform
	if platform.OS == "" {
		platform = v1.Platform{OS: "linux", Architecture: "amd64"}
	}
	keychain := l.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	img, err := remote.Image(parsed, remote.WithContext(ctx), remote.WithPlatform(platform), remote.WithAuthFromKeychain(keychain))
	if err != nil {
		return nil, fmt.Errorf("reading %s from its registry: %w", ref, err)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("reading the manifest of %s: %w", ref, err)
	}
	layers := make([]v1alpha1.Layer, len(manifest.Layers))
	for i, d := range manifest.Layers {
		layers[i] = v1alpha1.Layer{Digest: nodecache.Short(d.Digest.String()), Size: d.Size}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cache.put(ref, layers)
	return layers, nil
}
