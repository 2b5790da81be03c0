// Package registry reads an image's layers from its registry, for images
// no node holds yet: their compressed digests and sizes, as a
// NodeImageCache lists layers, so what a node lacks of them can be counted.
package registry

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Layers reads images' layers from their registries and keeps what it
// read: a manifest is fetched once per reference.
type Layers struct {
	// Platform is the nodes' platform, whose manifest an index resolves
	// to (linux/amd64 if empty).
	Platform v1.Platform
	// Keychain gives registry credentials (the docker config's if nil).
	Keychain authn.Keychain

	mu    sync.Mutex
	cache map[string][]v1alpha1.Layer
}

// Get returns the layers of image ref, base first.
func (l *Layers) Get(ctx context.Context, ref string) ([]v1alpha1.Layer, error) {
	l.mu.Lock()
	layers, ok := l.cache[ref]
	l.mu.Unlock()
	if ok {
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
	layers = make([]v1alpha1.Layer, len(manifest.Layers))
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
