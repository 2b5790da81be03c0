package nodecache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// containerdNamespace is where containerd's CRI plugin keeps the
// kubelet's images.
const containerdNamespace = "k8s.io"

// Runtime reads a node's images: the images, their references and the
// image filesystem through CRI, which every runtime serves, and each
// image's compressed layers from the manifest in containerd's content
// store, which CRI does not expose, on the same socket.
type Runtime struct {
	cri  internalapi.ImageManagerService
	conn *grpc.ClientConn
}

// Dial connects to the CRI socket at endpoint (unix:///run/containerd/containerd.sock).
func Dial(ctx context.Context, endpoint string) (*Runtime, error) {
	target := endpoint
	if !strings.Contains(target, "://") {
		target = "unix://" + target
	}
	// Made first: it fails only on a bad address, and leaves nothing open.
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd at %s: %w", endpoint, err)
	}
	cri, err := remote.NewRemoteImageService(ctx, endpoint, 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("connecting to the CRI image service at %s: %w", endpoint, err), conn.Close())
	}
	return &Runtime{cri: cri, conn: conn}, nil
}

// Close closes the connection to containerd.
func (r *Runtime) Close() error { return r.conn.Close() }

// Snapshot is what a read of the runtime found.
type Snapshot struct {
	Images     []RuntimeImage
	Filesystem v1alpha1.ImageFilesystem
	// Partial says what could not be read, when something could not;
	// the images are then listed without some or all of their layers.
	Partial []string
}

// Read lists the runtime's images with their layers and its image
// filesystem. It fails only when CRI cannot list the images; what else
// fails is named in Snapshot.Partial.
func (r *Runtime) Read(ctx context.Context) (Snapshot, error) {
	listed, err := r.cri.ListImages(ctx, nil)
	if err != nil {
		return Snapshot{}, fmt.Errorf("listing images through CRI: %w", err)
	}
	var s Snapshot
	if fs, err := r.cri.ImageFsInfo(ctx); err != nil {
		s.Partial = append(s.Partial, fmt.Sprintf("image filesystem: %v", err))
	} else {
		for _, u := range fs.GetImageFilesystems() {
			s.Filesystem.UsedBytes += int64(u.GetUsedBytes().GetValue())
			// The filesystem's size, where this process sees its mount
			// (an agent mounts it read-only at the same path).
			var st unix.Statfs_t
			if unix.Statfs(u.GetFsId().GetMountpoint(), &st) == nil {
				s.Filesystem.CapacityBytes += int64(st.Blocks) * st.Bsize
				s.Filesystem.AvailableBytes += int64(st.Bavail) * st.Bsize
			}
		}
	}
	store := imagesapi.NewImagesClient(r.conn)
	content := contentapi.NewContentClient(r.conn)
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", containerdNamespace)
	var missing int
	for _, img := range listed {
		ri := RuntimeImage{RepoTags: img.GetRepoTags(), RepoDigests: img.GetRepoDigests()}
		layers, manifest, err := readLayers(ctx, store, content, img)
		if err != nil {
			if missing == 0 {
				s.Partial = append(s.Partial, fmt.Sprintf("layers of %s: %v", img.GetId(), err))
			}
			missing++
		}
		ri.Layers, ri.ManifestDigest = layers, manifest
		s.Images = append(s.Images, ri)
	}
	if missing > 1 {
		s.Partial = append(s.Partial, fmt.Sprintf("and the layers of %d more images", missing-1))
	}
	return s, nil
}

// readLayers reads an image's manifest from containerd's content store.
// An index is resolved to this machine's platform.
func readLayers(ctx context.Context, store imagesapi.ImagesClient, content contentapi.ContentClient, img *criapi.Image) ([]RuntimeLayer, string, error) {
	names := append(append([]string{}, img.GetRepoDigests()...), img.GetRepoTags()...)
	names = append(names, img.GetId())
	target := ""
	for _, name := range names {
		resp, err := store.Get(ctx, &imagesapi.GetImageRequest{Name: name})
		if err != nil {
			if status.Code(err) == codes.NotFound {
				continue
			}
			return nil, "", fmt.Errorf("reading image %s from containerd: %w", name, err)
		}
		target = resp.GetImage().GetTarget().GetDigest()
		break
	}
	if target == "" {
		return nil, "", errors.New("containerd does not know the image under any of its names")
	}
	for range 2 {
		b, err := readBlob(ctx, content, target)
		if err != nil {
			return nil, "", err
		}
		var m struct {
			Manifests []ocispec.Descriptor `json:"manifests"`
			Layers    []ocispec.Descriptor `json:"layers"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, "", fmt.Errorf("manifest %s: %w", target, err)
		}
		if len(m.Manifests) == 0 {
			layers := make([]RuntimeLayer, len(m.Layers))
			for i, l := range m.Layers {
				layers[i] = RuntimeLayer{Digest: l.Digest.String(), Size: l.Size}
			}
			return layers, target, nil
		}
		next := platformManifest(m.Manifests)
		if next == nil {
			return nil, "", fmt.Errorf("index %s has no manifest for %s/%s", target, runtime.GOOS, runtime.GOARCH)
		}
		target = next.Digest.String()
	}
	return nil, "", fmt.Errorf("index %s points to another index", target)
}

func platformManifest(ms []ocispec.Descriptor) *ocispec.Descriptor {
	for i, m := range ms {
		if m.Platform == nil || (m.Platform.OS == runtime.GOOS && m.Platform.Architecture == runtime.GOARCH) {
			return &ms[i]
		}
	}
	return nil
}

// readBlob reads a small blob (a manifest or index) from the content store.
func readBlob(ctx context.Context, content contentapi.ContentClient, digest string) ([]byte, error) {
	stream, err := content.Read(ctx, &contentapi.ReadContentRequest{Digest: digest})
	if err != nil {
		return nil, fmt.Errorf("reading %s from containerd's content store: %w", digest, err)
	}
	var b []byte
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s from containerd's content store: %w", digest, err)
		}
		b = append(b, resp.GetData()...)
	}
}
