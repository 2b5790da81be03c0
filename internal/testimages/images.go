// Package testimages builds the container images the tests run from what
// this machine has — a static pause binary compiled with gcc, Debian's
// busybox-static, and a Debian minbase root made with mmdebstrap — so that no
// test needs a registry on the internet. Each layer is cached under a key
// derived from its inputs, so a second run builds nothing; Push then copies
// the images into the test cluster's registry under their upstream names.
package testimages

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images, by the names pods use. The cluster's containerd resolves
// every registry to its loopback registry, so these upstream-style names
// work unchanged.
const (
	Pause   = "registry.k8s.io/pause:3.10"
	Busybox = "docker.io/library/busybox:1.36"
)

// Problem is the name of SWE-bench-like problem image n (1 to
// ProblemCount). All share Debian, git, python3 and a Python environment
// layer — nearly all their bytes — and differ in a small /testbed
// repository.
func Problem(n int) string {
	return fmt.Sprintf("docker.io/swebench/sweb.eval.x86_64.sandbox-fleet__calc-%d:latest", n)
}

// ProblemCount is how many problem images there are.
const ProblemCount = 3

// Builder builds images, caching layers in Dir.
type Builder struct {
	Dir string
	// Log, when set, is told about slow steps.
	Log func(format string, args ...any)
}

// Image is a built image and the name it is pushed under.
type Image struct {
	Ref   string
	Image v1.Image
}

// All builds every test image: pause, busybox and the problem images.
func (b *Builder) All(ctx context.Context) ([]Image, error) {
	pause, err := b.Pause(ctx)
	if err != nil {
		return nil, err
	}
	busybox, err := b.Busybox(ctx)
	if err != nil {
		return nil, err
	}
	problems, err := b.Problems(ctx)
	if err != nil {
		return nil, err
	}
	return append([]Image{pause, busybox}, problems...), nil
}

// Pause builds the pod sandbox image.
func (b *Builder) Pause(ctx context.Context) (Image, error) {
	gccVersion, err := exec.CommandContext(ctx, "gcc", "--version").Output()
	if err != nil {
		return Image{}, fmt.Errorf("the pause image needs gcc: %w", err)
	}
	layer, err := b.layer("pause", [][]byte{pauseSource, gccVersion}, tarLayer(func(w layerWriter) error {
		bin, err := b.compilePause(ctx)
		if err != nil {
			return err
		}
		return w.file("pause", 0o755, bin)
	}))
	if err != nil {
		return Image{}, err
	}
	return image(Pause, v1.Config{Entrypoint: []string{"/pause"}}, layer)
}

//go:embed src/pause.c
var pauseSource []byte

func (b *Builder) compilePause(ctx context.Context) ([]byte, error) {
	dir, err := os.MkdirTemp("", "pause-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "pause.c")
	if err := os.WriteFile(src, pauseSource, 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "pause")
	if msg, err := exec.CommandContext(ctx, "gcc", "-static", "-O2", "-o", out, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compiling pause: %v\n%s", err, msg)
	}
	return os.ReadFile(out)
}

// busyboxPath is Debian busybox-static's binary.
const busyboxPath = "/bin/busybox"

// Busybox builds a busybox image: the static binary, a link per applet, and
// the few files a shell expects.
func (b *Builder) Busybox(ctx context.Context) (Image, error) {
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return Image{}, fmt.Errorf("the busybox image needs Debian's busybox-static (hack/node-deps.sh installs it): %w", err)
	}
	layer, err := b.layer("busybox", [][]byte{bin}, tarLayer(func(w layerWriter) error {
		applets, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
		if err != nil {
			return fmt.Errorf("listing busybox applets: %w", err)
		}
		if err := rootSkeleton(w); err != nil {
			return err
		}
		if err := w.file("bin/busybox", 0o755, bin); err != nil {
			return err
		}
		for _, a := range strings.Fields(string(applets)) {
			if a != "busybox" {
				if err := w.symlink("bin/"+a, "busybox"); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	if err != nil {
		return Image{}, err
	}
	return image(Busybox, v1.Config{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}}, layer)
}

func rootSkeleton(w layerWriter) error {
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin", 0o755}, {"etc", 0o755}, {"root", 0o700}, {"tmp", 0o1777}} {
		if err := w.dir(d.name, d.mode); err != nil {
			return err
		}
	}
	if err := w.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n")); err != nil {
		return err
	}
	return w.file("etc/group", 0o644, []byte("root:x:0:\n"))
}

// layer returns the cached layer named by stem and the hash of inputs.
func (b *Builder) layer(stem string, inputs [][]byte, write func(io.Writer) error) (v1.Layer, error) {
	h := sha256.New()
	for _, in := range inputs {
		fmt.Fprintf(h, "%d:", len(in))
		h.Write(in)
	}
	key := stem + "-" + hex.EncodeToString(h.Sum(nil))[:16]
	path, err := cachedLayer(filepath.Join(b.Dir, "layers"), key, write)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(path)
}

func image(ref string, cfg v1.Config, layers ...v1.Layer) (Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return Image{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Config = "amd64", "linux", cfg
	cf.Created = v1.Time{Time: epoch}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return Image{}, err
	}
	return Image{Ref: ref, Image: img}, nil
}

// Push copies images into the registry at addr (host:port, plain HTTP),
// each under its repository path, which is where a containerd whose hosts
// point every registry at addr looks for it.
func Push(ctx context.Context, addr string, images ...Image) error {
	for _, img := range images {
		upstream, err := name.ParseReference(img.Ref)
		if err != nil {
			return err
		}
		local, err := name.ParseReference(addr+"/"+upstream.Context().RepositoryStr()+":"+upstream.Identifier(), name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.Write(local, img.Image, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("pushing %s to %s: %w", img.Ref, local, err)
		}
	}
	return nil
}

// Binary builds an image holding one static binary as its entrypoint, run
// as a non-root user: how the pinned Agent Sandbox controller is packaged
// for clusters that pull images, such as kind.
func (b *Builder) Binary(ref, path string) (Image, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return Image{}, err
	}
	base := filepath.Base(path)
	layer, err := b.layer("bin-"+base, [][]byte{bin}, tarLayer(func(w layerWriter) error {
		return w.file(base, 0o755, bin)
	}))
	if err != nil {
		return Image{}, err
	}
	return image(ref, v1.Config{Entrypoint: []string{"/" + base}, User: "65532:65532"}, layer)
}
