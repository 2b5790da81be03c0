package componentimage

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testregistry"
)

// The image runs the webhook binary as the non-root user the Deployment
// asks for, read back from its archive and from a registry it was pushed
// to.
func TestBuild(t *testing.T) {
	built, err := Build(Options{Root: "../..", Command: "asrl-webhook", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "asrl-webhook.tar")
	if err := WriteArchive(out, "example.com/asrl-webhook:test", built); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("example.com/asrl-webhook:test")
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	reg := testregistry.Start(t)
	ref := reg.Host + "/sandbox-fleet/asrl-webhook:v0.0.1"
	if err := Push(context.Background(), ref, built); err != nil {
		t.Fatal(err)
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(parsed)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := built.Digest()
	if got, err := pulled.Digest(); err != nil || got != want {
		t.Errorf("the pushed image reads back as %v (%v), want %v", got, err, want)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/asrl-webhook" {
		t.Errorf("config %s/%s user %q entrypoint %v", cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint)
	}
	deployment, err := os.ReadFile("../../manifests/webhook/deployment.yaml")
	if err != nil || !bytes.Contains(deployment, []byte("runAsUser: 65532")) {
		t.Errorf("the Deployment does not run as the image's user 65532 (%v)", err)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	found := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4)
		_, _ = io.ReadFull(tr, head)
		switch hdr.Name {
		case "asrl-webhook":
			found[hdr.Name] = hdr.Mode == 0o755 && string(head) == "\x7fELF"
		case "etc/passwd":
			found[hdr.Name] = true
		}
	}
	if !found["asrl-webhook"] || !found["etc/passwd"] {
		t.Errorf("the layer lacks an executable /asrl-webhook or /etc/passwd: %v", found)
	}
}
