// Package registry reads an image's layers from its registry, for images
// no node holds yet: their compressed digests and sizes, as a
// NodeImageCache lists layers, so what a node lacks of them can be counted.
package registry

import (
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
// read: a manifest is fetched once per reference, so a tag moved to
// another image is not seen until the process restarts (task images are
// not retagged).
type Layers struct {
	// Platform is the nodes' platform, whose manifest an index resolves
	// to (linux/amd64 if empty).
	Platform v1.Platform
	// Keychain gives registry credentials (the docker config's if nil).
	Keychain authn.Keychain
	// Failed, if set, hears of each of Known's reads that failed.
	Failed func(ref string, err error)

	mu    sync.Mutex
	cache map[string][]v1alpha1.Layer
	// reading holds the references Known is reading (the zero time) or
	// failed to read (when it may try again).
	reading map[string]time.Time
	slots   chan struct{}
}

// Known's reads: how many at once, how long each may take, how long
// after a failure the image is read again.
const (
	knownReads      = 4
	knownTimeout    = 30 * time.Second
	knownRetryAfter = 5 * time.Minute
)

// Known returns the layers of image ref if they have been read, without
// waiting: otherwise it starts reading them in the background (unless a
// read is under way, or failed within the last five minutes) and reports
// false. A scheduler's or an admission webhook's hot path takes the image
// as unknown until then.
func (l *Layers) Known(ref string) ([]v1alpha1.Layer, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if layers, ok := l.cache[ref]; ok {
		return layers, true
	}
	if at, ok := l.reading[ref]; ok && (at.IsZero() || time.Now().Before(at)) {
		return nil, false
	}
	if l.reading == nil {
		l.reading = map[string]time.Time{}
		l.slots = make(chan struct{}, knownReads)
	}
	l.reading[ref] = time.Time{}
	go l.readInBackground(ref)
	return nil, false
}

// Cached returns the layers of image ref if they have been read, and
// never reads.
func (l *Layers) Cached(ref string) ([]v1alpha1.Layer, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	layers, ok := l.cache[ref]
	return layers, ok
}

// readInBackground reads ref's layers for Known.
func (l *Layers) readInBackground(ref string) {
	l.slots <- struct{}{}
	defer func() { <-l.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), knownTimeout)
	defer cancel()
	_, err := l.Get(ctx, ref)
	l.mu.Lock()
	if err == nil {
		delete(l.reading, ref)
	} else {
		l.reading[ref] = time.Now().Add(knownRetryAfter)
	}
	failed := l.Failed
	l.mu.Unlock()
	if err != nil && failed != nil {
		failed(ref, err)
	}
}

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
	if l.cache == nil {
		l.cache = map[string][]v1alpha1.Layer{}
	}
	l.cache[ref] = layers
	return layers, nil
}
