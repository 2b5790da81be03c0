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

// GetAll reads the layers of images, a few at a time, each read bounded
// by a timeout, for a command that waits for them: the images read, and
// an error for each that could not be, in the images' order.
func (l *Layers) GetAll(ctx context.Context, images []string) (map[string][]v1alpha1.Layer, []error) {
	const reads, timeout = 8, 30 * time.Second
	layers := make([][]v1alpha1.Layer, len(images))
	errs := make([]error, len(images))
	var wg sync.WaitGroup
	slots := make(chan struct{}, reads)
	for i, img := range images {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			layers[i], errs[i] = l.Get(ctx, img)
		})
	}
	wg.Wait()
	found := map[string][]v1alpha1.Layer{}
	var failed []error
	for i, img := range images {
		if errs[i] != nil {
			failed = append(failed, errs[i])
		} else {
			found[img] = layers[i]
		}
	}
	return found, failed
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
