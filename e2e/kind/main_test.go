package main

import (
	"context"
	"io"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
)

// What e2e/kind sets up for the kind nodes' pulls, but for Docker: the
// test registry started from its binary, and an image pushed to it read
// back through the relay the nodes pull through (here on loopback, where
// kind has it on its network's gateway).
func TestRegistryThroughRelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	registry, registryProc, err := testcluster.StartRegistry(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer registryProc.Stop()
	relayed, err := relay(ctx, "127.0.0.1:0", registry)
	if err != nil {
		t.Fatal(err)
	}

	img, err := random.Image(1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := name.ParseReference(registry+"/sandbox-fleet/relayed:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(pushed, img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	through, err := name.ParseReference(relayed+"/sandbox-fleet/relayed:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(through, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if d, err := got.Digest(); err != nil || d != want {
		t.Fatalf("read %s (%v) through the relay, pushed %s", d, err, want)
	}
	layers, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if size, _ := l.Size(); err != nil || n != size {
			t.Fatalf("read %d bytes of a %d-byte layer through the relay: %v", n, size, err)
		}
	}
}
