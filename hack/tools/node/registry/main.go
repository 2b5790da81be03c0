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
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "loopback address to listen on")
	dir := flag.String("blobs", "", "directory for blobs")
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
	mux.Handle("/", handler)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("registry listening on %s, blobs in %s", *addr, *dir)
	log.Fatal(srv.ListenAndServe())
}
