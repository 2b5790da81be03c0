// Package componentimage builds the container images of the project's
// commands (asrl-webhook, asrl-prepull-agent, asrl-scheduler) without a
// Docker engine — the static binary and a passwd entry for its non-root
// user on an empty base — and writes them as docker archives or pushes
// them to a registry.
package componentimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandbox-fleet/sandbox-fleet/internal/gobuild"
)

// nonroot is the image's user, matching the webhook Deployment's
// runAsUser. (The node agent's DaemonSet runs it as root, which owns
// the runtime's socket.)
const nonroot = 65532

// Commands are the commands under cmd/ that ship as images.
var Commands = []string{"asrl-webhook", "asrl-prepull-agent", "asrl-scheduler"}

// Options of an image build.
type Options struct {
	// Root is the module's directory.
	Root string
	// Command is the directory under cmd/ of the binary the image runs.
	Command       string
	Arch, LDFlags string
}

// Build compiles cmd/Command for linux/Arch into its image. Files carry
// a fixed time, so a build is reproducible.
func Build(o Options) (v1.Image, error) {
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	tmp, err := os.MkdirTemp("", o.Command+"-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, o.Command)
	if err := gobuild.Command(o.Root, o.Command, bin, gobuild.Target{GOOS: "linux", GOARCH: o.Arch, LDFlags: o.LDFlags}); err != nil {
		return nil, err
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	layer, err := layer([]file{
		{"etc/passwd", []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot)), 0o644},
		{"etc/group", []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot)), 0o644},
		{o.Command, binary, 0o755},
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.Arch, v1.Time{Time: time.Unix(0, 0)}
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + o.Command},
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		WorkingDir: "/",
		Labels:     map[string]string{"org.opencontainers.image.source": "https://github.com/sandbox-fleet/sandbox-fleet"},
	}
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img, named ref, as a docker archive at path (for
// `docker load` or `kind load image-archive`).
func WriteArchive(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// Push writes img to its registry as ref, with the credentials of the
// docker config (DOCKER_CONFIG, ~/.docker/config.json); a registry on
// loopback is spoken to over plain HTTP.
func Push(ctx context.Context, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	return nil
}

type file struct {
	path string
	data []byte
	mode int64
}

// layer is one image layer holding files.
func layer(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{Name: f.path, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
