package registry_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testregistry"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

// An image's layers are read from its registry once; GetAll reads many
// and says which it could not.
func TestLayers(t *testing.T) {
	r := testregistry.Start(t)
	ref, want := r.PushRandom(t, "swebench/django-1:latest")
	l := &registry.Layers{}
	r.Manifests.Store(0)
	for range 2 {
		got, err := l.Get(context.Background(), ref)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Get = %v, %v; want %v", got, err, want)
		}
	}
	if n := r.Manifests.Load(); n != 1 {
		t.Errorf("%d manifest requests for two reads, want 1", n)
	}
	if _, err := l.Get(context.Background(), r.Host+"/swebench/missing:1"); err == nil || !strings.Contains(err.Error(), "missing:1") {
		t.Errorf("a missing image: %v, want an error naming it", err)
	}

	other, wantOther := r.PushRandom(t, "swebench/flask-1:latest")
	read := l.GetAll(context.Background(), []string{ref, r.Host + "/swebench/missing:1", other, r.Host + "/swebench/missing:2"}, time.Minute)
	found, failed := read.Found, read.Failed
	if len(read.Skipped) > 0 {
		t.Errorf("GetAll skipped %v of a registry that answers", read.Skipped)
	}
	if len(found) != 2 || !slices.Equal(found[ref], want) || !slices.Equal(found[other], wantOther) {
		t.Errorf("GetAll found %v, want %s and %s", found, ref, other)
	}
	if len(failed) != 2 || !strings.Contains(failed[0].Error(), "missing:1") || !strings.Contains(failed[1].Error(), "missing:2") {
		t.Errorf("GetAll failed %v, want the two missing images, in order", failed)
	}
}

// A registry that never answers costs GetAll one read's timeout, not one
// per image: once a read of it times out, its other images are skipped and
// said to be. Images of a registry that answers are read all the same, and
// once ctx has ended nothing more is read.
func TestGetAllBounded(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	r := testregistry.Start(t)
	ref, want := r.PushRandom(t, "swebench/django-1:latest")

	images := []string{ref}
	for i := range 40 {
		images = append(images, fmt.Sprintf("%s/swebench/img-%d:v1", silent.Addr(), i))
	}
	read := (&registry.Layers{}).GetAll(context.Background(), images, 300*time.Millisecond)
	if !slices.Equal(read.Found[ref], want) {
		t.Errorf("the answering registry's image was not read: %v", read.Found)
	}
	if len(read.Failed)+len(read.Skipped) != 40 || len(read.Skipped) < 40-8 {
		t.Errorf("of 40 images on a silent registry %d failed and %d were skipped; want at most one round of reads to fail, the rest skipped",
			len(read.Failed), len(read.Skipped))
	}
	// A read may try https and then http: one round of eight reads
	// opens at most sixteen connections, against eighty for every image.
	if n := conns.Load(); n > 16 {
		t.Errorf("the silent registry was connected to %d times, more than one round of reads", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	read = (&registry.Layers{}).GetAll(ctx, []string{ref}, time.Minute)
	if len(read.Found) != 0 || !slices.Equal(read.Skipped, []string{ref}) {
		t.Errorf("GetAll after ctx ended = %+v, want the image skipped", read)
	}
}

// Known does not wait: it reads an image in the background, once however
// often it is asked, and has its layers afterwards (as has Cached, which
// never reads); a failed read is reported and not retried at once.
func TestKnown(t *testing.T) {
	r := testregistry.Start(t)
	ref, want := r.PushRandom(t, "swebench/django-1:latest")
	failures := make(chan string, 10)
	l := &registry.Layers{Failed: func(ref string, err error) { failures <- ref }}
	r.Manifests.Store(0)
	if _, ok := l.Cached(ref); ok {
		t.Fatal("Cached has the layers before anything was read")
	}
	if n := r.Manifests.Load(); n != 0 {
		t.Fatalf("Cached read the registry (%d manifest requests)", n)
	}
	if _, ok := l.Known(ref); ok {
		t.Fatal("Known has the layers before anything was read")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok := l.Known(ref)
		if ok {
			if cached, _ := l.Cached(ref); !slices.Equal(got, want) || !slices.Equal(cached, want) {
				t.Fatalf("Known = %v, Cached = %v, want %v", got, cached, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Known has no layers 10 seconds after the first ask")
		}
		time.Sleep(time.Millisecond)
	}
	if n := r.Manifests.Load(); n != 1 {
		t.Errorf("%d manifest requests, want 1", n)
	}

	missing := r.Host + "/swebench/missing:1"
	if _, ok := l.Known(missing); ok {
		t.Fatal("Known has layers of a missing image")
	}
	select {
	case got := <-failures:
		if got != missing {
			t.Errorf("failed on %s, want %s", got, missing)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the failed read was not reported")
	}
	r.Manifests.Store(0)
	if _, ok := l.Known(missing); ok {
		t.Fatal("Known has layers of a missing image")
	}
	// Time enough for a read to reach the registry, were one started.
	time.Sleep(200 * time.Millisecond)
	if n := r.Manifests.Load(); n != 0 {
		t.Errorf("a failed image was read again at once (%d manifest requests)", n)
	}
}

// A registry that never answers costs Known a bounded number of
// goroutines and references, however many images are asked for.
func TestKnownBounded(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	before := runtime.NumGoroutine()
	l := &registry.Layers{}
	for i := range 10000 {
		if _, ok := l.Known(fmt.Sprintf("%s/swebench/task:%d", silent.Addr(), i)); ok {
			t.Fatal("Known has layers from a registry that never answers")
		}
	}
	// The readers' connections add a few goroutines each.
	if grown := runtime.NumGoroutine() - before; grown > 40 {
		t.Errorf("10000 images of a silent registry grew %d goroutines, want at most 40", grown)
	}
	// The queue's 256 and the 4 being read.
	if n := l.Pending(); n > 260 {
		t.Errorf("%d references wait to be read, want at most 260", n)
	}
}
