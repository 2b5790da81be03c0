// Package testregistry is go-containerregistry's registry, in memory on
// loopback, for tests of what reads images' manifests from registries.
package testregistry

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Registry is a running registry.
type Registry struct {
	// Host is its host:port, for image references.
	Host string
	// Manifests counts the manifest requests it has served.
	Manifests atomic.Int32
}

// Start starts a registry that stops when the test ends.
func Start(t testing.TB) *Registry {
	r := &Registry{}
	handler := ggcrregistry.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.Contains(req.URL.Path, "/manifests/") {
			r.Manifests.Add(1)
		}
		handler.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// PushRandom pushes an image of three random layers as repoTag
// (repository:tag) and returns its reference and its layers as a
// NodeImageCache lists them.
func (r *Registry) PushRandom(t testing.TB, repoTag string) (string, []v1alpha1.Layer) {
	t.Helper()
	img, err := random.Image(1024, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref := r.Host + "/" + repoTag
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	manifest, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var layers []v1alpha1.Layer
	for _, l := range manifest.Layers {
		layers = append(layers, v1alpha1.Layer{Digest: nodecache.Short(l.Digest.String()), Size: l.Size})
	}
	return ref, layers
}
