package testimages

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// The same inputs give the same image bytes, from a fresh cache or a warm
// one, so digests are stable across runs and machines.
func TestImagesAreReproducible(t *testing.T) {
	ctx := context.Background()
	digests := func(b *Builder) []string {
		t.Helper()
		var out []string
		for _, build := range []func(context.Context) (Image, error){b.Pause, b.Busybox} {
			img, err := build(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d, err := img.Image.Digest()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d.String())
		}
		return out
	}
	dir := t.TempDir()
	first := digests(&Builder{Dir: dir})
	cached := digests(&Builder{Dir: dir})
	fresh := digests(&Builder{Dir: t.TempDir()})
	if strings.Join(first, ",") != strings.Join(cached, ",") || strings.Join(first, ",") != strings.Join(fresh, ",") {
		t.Errorf("digests differ: first %v, from cache %v, fresh cache %v", first, cached, fresh)
	}
}

// Push stores an image under its repository path, where containerd looks
// for the upstream name when every registry resolves to this one.
func TestPushUnderUpstreamPath(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	img, err := (&Builder{Dir: t.TempDir()}).Busybox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	if err := Push(ctx, addr, img); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(addr+"/library/busybox:1.36", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s back: %v", ref, err)
	}
	want, _ := img.Image.Digest()
	if d, _ := got.Digest(); d != want {
		t.Errorf("pulled digest %s, pushed %s", d, want)
	}
	cf, err := got.ConfigFile()
	if err != nil || cf.Config.Cmd[0] != "sh" || cf.OS != "linux" {
		t.Errorf("config %+v, err %v", cf, err)
	}
}
