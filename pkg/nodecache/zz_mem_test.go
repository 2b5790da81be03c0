package nodecache_test

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func TestZZMem(t *testing.T) {
	srv, _ := testcri.Start(t.TempDir())
	defer srv.Stop()
	srv.Add(testcri.SWEBench(5000)...)
	rt, _ := nodecache.Dial(srv.Endpoint)
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	t.Logf("start heap %d", m.HeapInuse>>20)
	cache := &v1alpha1.NodeImageCache{}
	for i := 0; i < 3; i++ {
		snap, err := rt.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		nodecache.Observe(cache, snap, time.Now(), nodecache.MaxObjectBytes)
		b, _ := json.Marshal(cache)
		_ = b
		runtime.ReadMemStats(&m)
		t.Logf("after read %d: heap inuse %d MiB, total alloc %d MiB", i, m.HeapInuse>>20, m.TotalAlloc>>20)
	}
	runtime.GC()
	runtime.ReadMemStats(&m)
	t.Logf("after GC: heap inuse %d MiB", m.HeapInuse>>20)
	f, _ := os.Create("/tmp/heap.prof")
	pprof.WriteHeapProfile(f)
	f.Close()
	runtime.KeepAlive(cache)
	runtime.KeepAlive(rt)
}
