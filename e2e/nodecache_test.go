package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.opentelemetry.io/otel/trace/noop"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	cri "k8s.io/cri-client/pkg"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// The node cache reads the runtime's images with the layers they were
// built from: compressed digests and sizes, base first.
func TestRuntimeRead(t *testing.T) {
	if local == nil {
		t.Skip("needs the suite's own real node")
	}
	ctx := context.Background()
	endpoint := "unix://" + local.CRISocket()
	images, err := cri.NewRemoteImageService(ctx, endpoint, 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	ref := testimages.Problem(2)
	if _, err := images.PullImage(ctx, &criapi.ImageSpec{Image: ref}, nil, nil); err != nil {
		t.Fatal(err)
	}
	// As built and pushed to the node's registry.
	upstream, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := name.ParseReference(local.RegistryAddr()+"/"+upstream.Context().RepositoryStr()+":"+upstream.Identifier(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	built, err := remote.Image(pushed, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := built.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var want []nodecache.RuntimeLayer
	for _, l := range manifest.Layers {
		want = append(want, nodecache.RuntimeLayer{Digest: l.Digest.String(), Size: l.Size})
	}
	wantDigest, err := built.Digest()
	if err != nil {
		t.Fatal(err)
	}

	rt, err := nodecache.Dial(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	snap, err := rt.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Partial) > 0 {
		t.Errorf("partial read: %v", snap.Partial)
	}
	// containerd counts the image filesystem's use every 10 s or so.
	fs := snap.Filesystem
	for deadline := time.Now().Add(30 * time.Second); fs.UsedBytes == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		again, err := rt.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs = again.Filesystem
	}
	if fs.UsedBytes <= 0 || fs.CapacityBytes < fs.UsedBytes || fs.AvailableBytes <= 0 {
		t.Errorf("image filesystem %+v, want its use, size and free space", fs)
	}
	found := false
	for _, img := range snap.Images {
		if !slices.Contains(img.RepoTags, ref) {
			continue
		}
		found = true
		if img.ManifestDigest != wantDigest.String() || !slices.Equal(img.Layers, want) {
			t.Errorf("%s read as manifest %s layers %v; built as %s %v", ref, img.ManifestDigest, img.Layers, wantDigest, want)
		}
	}
	if !found {
		t.Errorf("%s is not among the %d images read", ref, len(snap.Images))
	}
}
