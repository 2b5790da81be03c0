// Command image builds the container image of one of the project's
// commands (asrl-webhook, asrl-prepull-agent) without a Docker engine: the
// static binary and a passwd entry for its non-root user on an empty
// base, written as a docker archive (`docker load`, `kind load
// image-archive`) — `make image`.
//
//	go run ./hack/image -cmd asrl-webhook -tag ghcr.io/sandbox-fleet/asrl-webhook:v0.1.0 -out dist/asrl-webhook.tar [-arch arm64]
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandbox-fleet/sandbox-fleet/internal/gobuild"
)

// nonroot is the image's user, matching the webhook Deployment's
// runAsUser. (The node agent's DaemonSet runs it as root, which owns
// the runtime's socket.)
const nonroot = 65532

func main() {
	o := Options{Root: "."}
	flag.StringVar(&o.Command, "cmd", "asrl-webhook", "the command under cmd/ the image runs")
	flag.StringVar(&o.Tag, "tag", "", "image reference (default ghcr.io/sandbox-fleet/CMD:dev)")
	flag.StringVar(&o.Out, "out", "", "docker archive to write (default dist/CMD.tar)")
	flag.StringVar(&o.Arch, "arch", "amd64", "GOARCH of the image")
	flag.StringVar(&o.LDFlags, "ldflags", "", "go build -ldflags")
	flag.Parse()
	if o.Tag == "" {
		o.Tag = "ghcr.io/sandbox-fleet/" + o.Command + ":dev"
	}
	if o.Out == "" {
		o.Out = filepath.Join("dist", o.Command+".tar")
	}
	if err := Build(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// Options of an image build.
type Options struct {
	// Root is the module's directory; a relative Out is in it.
	Root string
	// Command is the directory under cmd/ of the binary the image runs.
	Command                 string
	Tag, Out, Arch, LDFlags string
}

// Build compiles cmd/Command for linux/Arch and writes its image to
// Out. Files carry a fixed time, so a build is reproducible.
func Build(o Options) error {
	tag, err := name.NewTag(o.Tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", o.Tag, err)
	}
	tmp, err := os.MkdirTemp("", o.Command+"-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, o.Command)
	if err := gobuild.Command(o.Root, o.Command, bin, gobuild.Target{GOOS: "linux", GOARCH: o.Arch, LDFlags: o.LDFlags}); err != nil {
		return err
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	layer, err := layer([]file{
		{"etc/passwd", []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot)), 0o644},
		{"etc/group", []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot)), 0o644},
		{o.Command, binary, 0o755},
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.Arch, v1.Time{Time: time.Unix(0, 0)}
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + o.Command},
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		WorkingDir: "/",
		Labels:     map[string]string{"org.opencontainers.image.source": "https://github.com/sandbox-fleet/sandbox-fleet"},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	out := o.Out
	if !filepath.IsAbs(out) {
		out = filepath.Join(o.Root, out)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
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
