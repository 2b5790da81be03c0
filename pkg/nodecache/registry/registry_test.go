package registry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

// An image's layers are read from its registry once, as a NodeImageCache
// would list them. The registry is go-containerregistry's, in memory on
// loopback.
func TestLayers(t *testing.T) {
	var manifests atomic.Int32
	handler := ggcrregistry.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") {
			manifests.Add(1)
		}
		handler.ServeHTTP(w, r)
	}))
	defer srv.Close()
	img, err := random.Image(1024, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(srv.URL, "http://") + "/swebench/django-1:latest"
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
	var want []v1alpha1.Layer
	for _, l := range manifest.Layers {
		want = append(want, v1alpha1.Layer{Digest: nodecache.Short(l.Digest.String()), Size: l.Size})
	}

	l := &registry.Layers{}
	manifests.Store(0)
	for range 2 {
		got, err := l.Get(context.Background(), ref)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Get = %v, %v; want %v", got, err, want)
		}
	}
	if n := manifests.Load(); n != 1 {
		t.Errorf("%d manifest requests for two reads, want 1", n)
	}
	if _, err := l.Get(context.Background(), strings.TrimPrefix(srv.URL, "http://")+"/swebench/missing:1"); err == nil || !strings.Contains(err.Error(), "missing:1") {
		t.Errorf("a missing image: %v, want an error naming it", err)
	}
}
