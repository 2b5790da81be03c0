// Package testcri is a container runtime that holds images without their
// content: it serves CRI's image service and the containerd images,
// content and events services the node agent reads, on a unix socket.
// It is the one fake of the node-cache tests, for what a real runtime
// cannot be made to do here: hold 5,000 multi-GB images, or fail in part.
// Everything else runs against the real containerd (e2e).
package testcri

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	ctrtypes "github.com/containerd/containerd/api/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Server is the fake runtime.
type Server struct {
	Endpoint string
	grpc     *grpc.Server
	socket   string

	mu sync.Mutex
	// images by ID (the digest of the manifest here), in insertion order.
	images map[string]image
	order  []string
	// names are the images' IDs by tag and digest reference.
	names map[string]string
	blobs map[string][]byte
	subs  map[chan struct{}]bool
	fault Fault
}

type image struct {
	tags, digests []string
	manifest      string
	size          uint64
}

// Fault is what the server fails to do, to test how readers cope.
type Fault struct {
	// NoEvents: the events service is unimplemented, as on CRI-O.
	NoEvents bool
	// NoContent: manifests cannot be read (a partial read).
	NoContent bool
	// NoList: listing images fails (a broken runtime).
	NoList bool
}

// Start serves a runtime holding no images on a socket in dir.
func Start(dir string) (*Server, error) {
	socket := filepath.Join(dir, "cri.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	s := &Server{Endpoint: "unix://" + socket, socket: socket, grpc: grpc.NewServer(),
		images: map[string]image{}, names: map[string]string{}, blobs: map[string][]byte{}, subs: map[chan struct{}]bool{}}
	criapi.RegisterImageServiceServer(s.grpc, criImages{s: s})
	imagesapi.RegisterImagesServer(s.grpc, ctrImages{s: s})
	contentapi.RegisterContentServer(s.grpc, content{s: s})
	eventsapi.RegisterEventsServer(s.grpc, events{s: s})
	go s.grpc.Serve(l)
	return s, nil
}

// Stop stops serving and removes the socket.
func (s *Server) Stop() {
	s.grpc.Stop()
	os.Remove(s.socket)
}

// SetFault sets what the server fails to do from now on.
func (s *Server) SetFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// Add puts images on the runtime and sends an image event.
func (s *Server) Add(imgs ...nodecache.RuntimeImage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, img := range imgs {
		m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest}
		m.SchemaVersion = 2
		var size int64
		for _, l := range img.Layers {
			m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(l.Digest), Size: l.Size})
			size += l.Size
		}
		b, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		manifest := img.ManifestDigest
		if manifest == "" {
			manifest = fmt.Sprintf("sha256:%x", sha256.Sum256(b))
		}
		s.blobs[manifest] = b
		if _, ok := s.images[manifest]; !ok {
			s.order = append(s.order, manifest)
		}
		s.images[manifest] = image{tags: img.RepoTags, digests: img.RepoDigests, manifest: manifest, size: uint64(size)}
		for _, ref := range append(slices.Clone(img.RepoTags), img.RepoDigests...) {
			s.names[ref] = manifest
		}
	}
	s.notify()
}

// Remove takes the images of these manifest digests off the runtime.
func (s *Server) Remove(manifests ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range manifests {
		delete(s.images, m)
		s.order = slices.DeleteFunc(s.order, func(id string) bool { return id == m })
	}
	s.notify()
}

func (s *Server) notify() {
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// find is the image known by a name: tag, digest reference or ID.
func (s *Server) find(name string) (image, bool) {
	if id, ok := s.names[name]; ok {
		name = id
	}
	img, ok := s.images[name]
	return img, ok
}

type criImages struct {
	criapi.UnimplementedImageServiceServer
	s *Server
}

func (c criImages) ListImages(context.Context, *criapi.ListImagesRequest) (*criapi.ListImagesResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.fault.NoList {
		return nil, status.Error(codes.Internal, "the runtime's image store is broken")
	}
	resp := &criapi.ListImagesResponse{}
	for _, id := range c.s.order {
		if img, ok := c.s.images[id]; ok {
			resp.Images = append(resp.Images, &criapi.Image{Id: id, RepoTags: img.tags, RepoDigests: img.digests, Size: img.size})
		}
	}
	return resp, nil
}

func (c criImages) ImageFsInfo(context.Context, *criapi.ImageFsInfoRequest) (*criapi.ImageFsInfoResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var used uint64
	for _, img := range c.s.images {
		used += img.size
	}
	return &criapi.ImageFsInfoResponse{ImageFilesystems: []*criapi.FilesystemUsage{{
		FsId: &criapi.FilesystemIdentifier{Mountpoint: "/nonexistent/image-fs"}, UsedBytes: &criapi.UInt64Value{Value: used}}}}, nil
}

type ctrImages struct {
	imagesapi.UnimplementedImagesServer
	s *Server
}

func (c ctrImages) Get(_ context.Context, req *imagesapi.GetImageRequest) (*imagesapi.GetImageResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	img, ok := c.s.find(req.GetName())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "image %q: not found", req.GetName())
	}
	return &imagesapi.GetImageResponse{Image: &imagesapi.Image{Name: req.GetName(),
		Target: &ctrtypes.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: img.manifest, Size: int64(len(c.s.blobs[img.manifest]))}}}, nil
}

type content struct {
	contentapi.UnimplementedContentServer
	s *Server
}

func (c content) Read(req *contentapi.ReadContentRequest, stream contentapi.Content_ReadServer) error {
	c.s.mu.Lock()
	b, ok := c.s.blobs[req.GetDigest()]
	fault := c.s.fault.NoContent
	c.s.mu.Unlock()
	if fault {
		return status.Error(codes.Unavailable, "the content store is unavailable")
	}
	if !ok {
		return status.Errorf(codes.NotFound, "content %s: not found", req.GetDigest())
	}
	return stream.Send(&contentapi.ReadContentResponse{Data: b})
}

type events struct {
	eventsapi.UnimplementedEventsServer
	s *Server
}

func (e events) Subscribe(_ *eventsapi.SubscribeRequest, stream eventsapi.Events_SubscribeServer) error {
	e.s.mu.Lock()
	if e.s.fault.NoEvents {
		e.s.mu.Unlock()
		return status.Error(codes.Unimplemented, "no events here")
	}
	ch := make(chan struct{}, 1)
	e.s.subs[ch] = true
	e.s.mu.Unlock()
	defer func() {
		e.s.mu.Lock()
		delete(e.s.subs, ch)
		e.s.mu.Unlock()
	}()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-ch:
			if err := stream.Send(&ctrtypes.Envelope{Namespace: "k8s.io", Topic: "/images/create"}); err != nil {
				return err
			}
		}
	}
}

// SWEBench makes n images shaped like SWE-bench's: a Debian base shared by
// all, a few environment layers shared by the images of one of 50
// repositories, and two layers of each instance's own.
func SWEBench(n int) []nodecache.RuntimeImage {
	r := rand.New(rand.NewPCG(1, 2))
	var base []nodecache.RuntimeLayer
	for i := range 4 {
		base = append(base, Layer(fmt.Sprintf("base-%d", i), 30<<20+r.Int64N(50<<20)))
	}
	imgs := make([]nodecache.RuntimeImage, n)
	for i := range imgs {
		repo := i % 50
		layers := append([]nodecache.RuntimeLayer(nil), base...)
		for k := range 3 {
			layers = append(layers, Layer(fmt.Sprintf("env-%d-%d", repo, k), 100<<20+int64(repo*k)<<10))
		}
		layers = append(layers, Layer(fmt.Sprintf("instance-%d-a", i), r.Int64N(200<<20)), Layer(fmt.Sprintf("instance-%d-b", i), r.Int64N(1<<20)))
		name := fmt.Sprintf("docker.io/swebench/sweb.eval.x86_64.repo%02d_1776_repo%02d-%05d", repo, repo, i)
		imgs[i] = nodecache.RuntimeImage{
			RepoTags:       []string{name + ":latest"},
			RepoDigests:    []string{name + "@" + Digest(fmt.Sprint("m", i))},
			ManifestDigest: Digest(fmt.Sprint("m", i)),
			Layers:         layers,
		}
	}
	return imgs
}

// Digest makes a sha256 digest from a name.
func Digest(name string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(name)))
}

// Layer makes a layer of a size from a name.
func Layer(name string, size int64) nodecache.RuntimeLayer {
	return nodecache.RuntimeLayer{Digest: Digest(name), Size: size}
}
