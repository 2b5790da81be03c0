package agent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// containerdNamespace is where containerd's CRI plugin keeps the
// kubelet's images.
const containerdNamespace = "k8s.io"

// Runtime reads a node's images: the images, their references and the
// image filesystem through CRI, which every runtime serves, and each
// image's compressed layers from the manifest in containerd's content
// store, which CRI does not expose, on the same socket.
type Runtime struct {
	// ImageFSPath is where this process sees the runtime's image
	// filesystem, when not at the runtime's own mountpoint (an agent in a
	// Pod mounts a directory of the same filesystem): its size and free
	// space are read there.
	ImageFSPath string

	endpoint string
	conn     *grpc.ClientConn
	cri      criapi.ImageServiceClient
	store    imagesapi.ImagesClient
	content  contentapi.ContentClient
	events   eventsapi.EventsClient

	mu sync.Mutex
	// manifests are what was read of each image ID's manifest, so a read
	// after a pull fetches only the new image's. Images share most of
	// their layers, so the manifests name them by index into layers.
	manifests  map[string]manifest
	layers     []nodecache.RuntimeLayer
	layerIndex map[string]int32
}

type manifest struct {
	digest string
	layers []int32
}

// callTimeout bounds each call to the runtime, so a hung runtime shows as
// unreachable instead of stalling the agent.
const callTimeout = 30 * time.Second

// Dial makes a connection to the runtime's socket at endpoint
// (unix:///run/containerd/containerd.sock). It connects lazily and
// reconnects by itself: a runtime that is down shows as errors from Read.
func Dial(endpoint string) (*Runtime, error) {
	target := endpoint
	if !strings.Contains(target, "://") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		// CRI lists every image in one message: 5,000 images are a few MiB.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
		grpc.WithAuthority("localhost"))
	if err != nil {
		return nil, fmt.Errorf("runtime endpoint %s: %w", endpoint, err)
	}
	return &Runtime{endpoint: endpoint, conn: conn, cri: criapi.NewImageServiceClient(conn),
		store: imagesapi.NewImagesClient(conn), content: contentapi.NewContentClient(conn),
		events: eventsapi.NewEventsClient(conn), manifests: map[string]manifest{}, layerIndex: map[string]int32{}}, nil
}

// Close closes the connection.
func (r *Runtime) Close() error { return r.conn.Close() }

// Read lists the runtime's images with their layers and its image
// filesystem. It fails only when CRI cannot list the images; what else
// fails is named in Snapshot.Partial.
func (r *Runtime) Read(ctx context.Context) (nodecache.Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	listed, err := r.list(ctx)
	if err != nil {
		return nodecache.Snapshot{}, err
	}
	var s nodecache.Snapshot
	s.Filesystem, err = r.Filesystem(ctx)
	if err != nil {
		s.Partial = append(s.Partial, fmt.Sprintf("image filesystem: %v", err))
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", containerdNamespace)
	seen := make(map[string]bool, len(listed))
	var missing int
	for _, img := range listed {
		seen[img.GetId()] = true
		m, ok := r.manifests[img.GetId()]
		if !ok {
			m, err = r.readManifest(ctx, img)
			if err != nil {
				if missing == 0 {
					s.Partial = append(s.Partial, fmt.Sprintf("layers of %s: %v", img.GetId(), err))
				}
				missing++
			} else {
				r.manifests[img.GetId()] = m
			}
		}
		ri := nodecache.RuntimeImage{RepoTags: img.GetRepoTags(), RepoDigests: img.GetRepoDigests(), ManifestDigest: m.digest,
			Layers: make([]nodecache.RuntimeLayer, len(m.layers))}
		for i, l := range m.layers {
			ri.Layers[i] = r.layers[l]
		}
		s.Images = append(s.Images, ri)
	}
	if missing > 1 {
		s.Partial = append(s.Partial, fmt.Sprintf("and the layers of %d more images", missing-1))
	}
	r.forget(seen)
	return s, nil
}

// forget drops the manifests of images no longer listed, and the layers
// no remaining manifest names.
func (r *Runtime) forget(listed map[string]bool) {
	removed := false
	for id := range r.manifests {
		if !listed[id] {
			delete(r.manifests, id)
			removed = true
		}
	}
	if !removed {
		return
	}
	old := r.layers
	r.layers, r.layerIndex = nil, make(map[string]int32, len(r.layerIndex))
	for _, m := range r.manifests {
		for i, l := range m.layers {
			m.layers[i] = r.layerAt(old[l])
		}
	}
}

// layerAt is the index of layer l in the table, added if new.
func (r *Runtime) layerAt(l nodecache.RuntimeLayer) int32 {
	if i, ok := r.layerIndex[l.Digest]; ok {
		return i
	}
	i := int32(len(r.layers))
	r.layers = append(r.layers, l)
	r.layerIndex[l.Digest] = i
	return i
}

func (r *Runtime) list(ctx context.Context) ([]*criapi.Image, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := r.cri.ListImages(ctx, &criapi.ListImagesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing images through CRI at %s: %w", r.endpoint, err)
	}
	return resp.GetImages(), nil
}

// Filesystem reads the runtime's image filesystems: their use, and their
// size and free space where this process sees them (at the runtime's
// mountpoint, or at ImageFSPath).
func (r *Runtime) Filesystem(ctx context.Context) (v1alpha1.ImageFilesystem, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var fs v1alpha1.ImageFilesystem
	resp, err := r.cri.ImageFsInfo(ctx, &criapi.ImageFsInfoRequest{})
	if err != nil {
		return fs, err
	}
	for _, u := range resp.GetImageFilesystems() {
		fs.UsedBytes += int64(u.GetUsedBytes().GetValue())
		mount := u.GetFsId().GetMountpoint()
		if r.ImageFSPath != "" {
			mount = r.ImageFSPath
		}
		var st unix.Statfs_t
		if err := unix.Statfs(mount, &st); err != nil {
			return fs, fmt.Errorf("the image filesystem at %s is not visible to the agent (%v): mount it into the agent's container, or give --image-fs-path, a directory on it the agent sees", mount, err)
		}
		fs.CapacityBytes += int64(st.Blocks) * st.Bsize
		fs.AvailableBytes += int64(st.Bavail) * st.Bsize
	}
	return fs, nil
}

// ImageID is the ID of image ref on the runtime, "" if it has none.
func (r *Runtime) ImageID(ctx context.Context, ref string) (string, error) {
	img, err := r.imageStatus(ctx, ref)
	return img.GetId(), err
}

// ImageSize is the size the runtime gives image ref, 0 if it has none.
func (r *Runtime) ImageSize(ctx context.Context, ref string) (int64, error) {
	img, err := r.imageStatus(ctx, ref)
	return int64(img.GetSize()), err
}

func (r *Runtime) imageStatus(ctx context.Context, ref string) (*criapi.Image, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := r.cri.ImageStatus(ctx, &criapi.ImageStatusRequest{Image: &criapi.ImageSpec{Image: ref}})
	if err != nil {
		return nil, fmt.Errorf("image status of %s through CRI: %w", ref, err)
	}
	return resp.GetImage(), nil
}

// ImagesInUse are the IDs of the images the runtime's containers run.
func (r *Runtime) ImagesInUse(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := criapi.NewRuntimeServiceClient(r.conn).ListContainers(ctx, &criapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing containers through CRI: %w", err)
	}
	used := map[string]bool{}
	for _, c := range resp.GetContainers() {
		used[c.GetImageRef()] = true
		used[c.GetImageId()] = true
	}
	return used, nil
}

// Pull pulls image ref through CRI, with the runtime's own credentials
// and mirrors. It waits as long as ctx lets it: a multi-GB image takes
// minutes.
func (r *Runtime) Pull(ctx context.Context, ref string) error {
	_, err := r.cri.PullImage(ctx, &criapi.PullImageRequest{Image: &criapi.ImageSpec{Image: ref}})
	if err != nil {
		return errors.New(status.Convert(err).Message())
	}
	return nil
}

// Remove removes image ref from the runtime.
func (r *Runtime) Remove(ctx context.Context, ref string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := r.cri.RemoveImage(ctx, &criapi.RemoveImageRequest{Image: &criapi.ImageSpec{Image: ref}}); err != nil {
		return fmt.Errorf("removing %s through CRI: %w", ref, err)
	}
	return nil
}

// imageEvents selects containerd's image events (create, update, delete)
// in the kubelet's namespace.
const imageEvents = `namespace==` + containerdNamespace + `,topic~="^/images/"`

// Watch calls changed soon after the runtime's images change, until ctx
// ends or the watch fails. It follows containerd's event stream; a
// runtime without one (CRI-O) is polled every poll for its image IDs
// and tags, a light call next to a full read.
func (r *Runtime) Watch(ctx context.Context, poll time.Duration, changed func()) error {
	stream, err := r.events.Subscribe(ctx, &eventsapi.SubscribeRequest{Filters: []string{imageEvents}})
	if err == nil {
		for {
			if _, err = stream.Recv(); err != nil {
				break
			}
			changed()
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if status.Code(err) != codes.Unimplemented {
		return fmt.Errorf("following containerd's image events at %s: %w", r.endpoint, err)
	}
	var last string
	for {
		listed, err := r.list(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := fingerprint(listed)
		if last != "" && now != last {
			changed()
		}
		last = now
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

// fingerprint identifies a listing by its image IDs and tags.
func fingerprint(listed []*criapi.Image) string {
	h := sha256.New()
	keys := make([]string, len(listed))
	for i, img := range listed {
		keys[i] = img.GetId() + "=" + strings.Join(img.GetRepoTags(), ",")
	}
	slices.Sort(keys)
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return string(h.Sum(nil))
}

// readManifest reads an image's manifest from containerd's content store.
// An index is resolved to this machine's platform.
func (r *Runtime) readManifest(ctx context.Context, img *criapi.Image) (manifest, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	names := append(append([]string{}, img.GetRepoDigests()...), img.GetRepoTags()...)
	names = append(names, img.GetId())
	target := ""
	for _, name := range names {
		resp, err := r.store.Get(ctx, &imagesapi.GetImageRequest{Name: name})
		if err != nil {
			if status.Code(err) == codes.NotFound {
				continue
			}
			return manifest{}, fmt.Errorf("reading image %s from containerd: %w", name, err)
		}
		target = resp.GetImage().GetTarget().GetDigest()
		break
	}
	if target == "" {
		return manifest{}, errors.New("containerd does not know the image under any of its names")
	}
	for range 2 {
		b, err := r.readBlob(ctx, target)
		if err != nil {
			return manifest{}, err
		}
		var m struct {
			Manifests []ocispec.Descriptor `json:"manifests"`
			Layers    []ocispec.Descriptor `json:"layers"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return manifest{}, fmt.Errorf("manifest %s: %w", target, err)
		}
		if len(m.Manifests) == 0 {
			layers := make([]int32, len(m.Layers))
			for i, l := range m.Layers {
				layers[i] = r.layerAt(nodecache.RuntimeLayer{Digest: l.Digest.String(), Size: l.Size})
			}
			return manifest{digest: target, layers: layers}, nil
		}
		next := platformManifest(m.Manifests)
		if next == nil {
			return manifest{}, fmt.Errorf("index %s has no manifest for %s/%s", target, runtime.GOOS, runtime.GOARCH)
		}
		target = next.Digest.String()
	}
	return manifest{}, fmt.Errorf("index %s points to another index", target)
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
func (r *Runtime) readBlob(ctx context.Context, digest string) ([]byte, error) {
	stream, err := r.content.Read(ctx, &contentapi.ReadContentRequest{Digest: digest})
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
