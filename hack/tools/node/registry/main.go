// Command registry is the test cluster's OCI registry: go-containerregistry's
// registry with blobs on disk, listening on loopback only. Images the tests
// build are pushed to it and the real node's containerd pulls from it, so no
// test needs a registry on the internet.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "loopback address to listen on")
	dir := flag.String("blobs", "", "directory for blobs")
	slowRate := flag.Int("slow-bytes-per-second", 4<<20, "rate at which the blobs of repositories with a path element named slow are served, so that tests can watch a pull in progress")
	linkRate := flag.Int("link-bytes-per-second", 16<<20, "rate of the link that the blobs of repositories with a path element named link share, as the pulls of a node share its network")
	flag.Parse()
	if *dir == "" {
		log.Fatal("--blobs is required")
	}
	if host, _, err := net.SplitHostPort(*addr); err != nil || !net.ParseIP(host).IsLoopback() {
		log.Fatalf("--addr %q: the registry listens on a loopback address only", *addr)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	handler := registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(*dir)))
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("/", slowed(handler, *slowRate, &link{rate: *linkRate}))
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("registry listening on %s, blobs in %s", *addr, *dir)
	log.Fatal(srv.ListenAndServe())
}

// slowed serves the blobs of repositories with a path element named slow
// (/v2/a/slow/b/blobs/...) at rate bytes a second each, those with a path
// element named link over the one shared link, and the rest as next does.
func slowed(next http.Handler, rate int, shared *link) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			switch {
			case strings.Contains(r.URL.Path, "/slow/"):
				w = &throttled{ResponseWriter: w, chunk: max(rate/10, 1), due: (&link{rate: rate}).take}
			case strings.Contains(r.URL.Path, "/link/"):
				w = &throttled{ResponseWriter: w, chunk: max(shared.rate/10, 1), due: shared.take}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// link is a connection of rate bytes a second that writers take turns on:
// each chunk is sent when the link has sent every chunk taken before it.
type link struct {
	rate int
	mu   sync.Mutex
	free time.Time // when the link has sent all it was given
}

// take reserves the link for n bytes and says when they are sent.
func (l *link) take(n int) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free = later(l.free, time.Now()).Add(time.Duration(float64(n) / float64(l.rate) * float64(time.Second)))
	return l.free
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// throttled writes in chunks, each once its link says it is sent.
type throttled struct {
	http.ResponseWriter
	chunk int
	due   func(n int) time.Time
}

func (t *throttled) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(t.chunk, len(p))
		time.Sleep(time.Until(t.due(c)))
		m, err := t.ResponseWriter.Write(p[:c])
		n += m
		if err != nil {
			return n, err
		}
		if f, ok := t.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		p = p[c:]
	}
	return n, nil
}
