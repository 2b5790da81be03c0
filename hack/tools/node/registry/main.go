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
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "loopback address to listen on")
	dir := flag.String("blobs", "", "directory for blobs")
	slowRate := flag.Int("slow-bytes-per-second", 4<<20, "rate at which the blobs of repositories with a path element named slow are served, so that tests can watch a pull in progress")
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
	mux.Handle("/", slowed(handler, *slowRate))
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("registry listening on %s, blobs in %s", *addr, *dir)
	log.Fatal(srv.ListenAndServe())
}

// slowed serves the blobs of repositories with a path element named slow
// (/v2/a/slow/b/blobs/...) at rate bytes a second, and the rest as next
// does.
func slowed(next http.Handler, rate int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/slow/") && strings.Contains(r.URL.Path, "/blobs/") {
			w = &throttled{ResponseWriter: w, rate: rate, start: time.Now()}
		}
		next.ServeHTTP(w, r)
	})
}

// throttled writes no faster than rate bytes a second since start, in
// chunks of a tenth of a second's worth.
type throttled struct {
	http.ResponseWriter
	rate    int
	start   time.Time
	written int
}

func (t *throttled) Write(p []byte) (int, error) {
	chunk := max(t.rate/10, 1)
	n := 0
	for len(p) > 0 {
		c := min(chunk, len(p))
		m, err := t.ResponseWriter.Write(p[:c])
		n += m
		t.written += m
		if err != nil {
			return n, err
		}
		if f, ok := t.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		p = p[c:]
		due := t.start.Add(time.Duration(float64(t.written) / float64(t.rate) * float64(time.Second)))
		time.Sleep(time.Until(due))
	}
	return n, nil
}
