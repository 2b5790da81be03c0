package swebench

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
)

// Manifests is a registry on loopback that serves the manifests of
// images, and nothing else: enough for a reader of images' layers (a
// run's pull plan reads those of images no node holds), while the pulls
// themselves are simulated. Its Host is the registry to make images In.
type Manifests struct {
	Host   string
	mu     sync.Mutex
	byPath map[string][]byte
	srv    *http.Server
}

// schema2 is the Docker image manifest's media type; registries answer
// with it and clients accept it.
const schema2 = "application/vnd.docker.distribution.manifest.v2+json"

// StartManifests starts an empty registry on 127.0.0.1.
func StartManifests() (*Manifests, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &Manifests{Host: l.Addr().String(), byPath: map[string][]byte{}}
	m.srv = &http.Server{Handler: http.HandlerFunc(m.serve)}
	go m.srv.Serve(l)
	return m, nil
}

// Add serves the manifests of images, which must be In m.Host.
func (m *Manifests) Add(images ...Image) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, img := range images {
		repo, tag, ok := strings.Cut(strings.TrimPrefix(img.Name, m.Host+"/"), ":")
		if !ok || !strings.HasPrefix(img.Name, m.Host+"/") {
			return fmt.Errorf("image %s is not in registry %s", img.Name, m.Host)
		}
		type descriptor struct {
			MediaType string `json:"mediaType"`
			Size      int64  `json:"size"`
			Digest    string `json:"digest"`
		}
		config := sha256.Sum256([]byte(img.Name))
		manifest := struct {
			SchemaVersion int          `json:"schemaVersion"`
			MediaType     string       `json:"mediaType"`
			Config        descriptor   `json:"config"`
			Layers        []descriptor `json:"layers"`
		}{SchemaVersion: 2, MediaType: schema2,
			Config: descriptor{MediaType: "application/vnd.docker.container.image.v1+json", Size: 2, Digest: "sha256:" + hex.EncodeToString(config[:])}}
		for _, l := range img.Layers {
			// The layer's digest as a NodeImageCache cuts it is the
			// 16 hex digits of the made-up one.
			manifest.Layers = append(manifest.Layers, descriptor{MediaType: "application/vnd.docker.image.rootfs.diff.tar.gzip",
				Size: l.Size, Digest: "sha256:" + l.Digest + strings.Repeat("0", 64-len(l.Digest))})
		}
		b, err := json.Marshal(manifest)
		if err != nil {
			return err
		}
		m.byPath["/v2/"+repo+"/manifests/"+tag] = b
	}
	return nil
}

func (m *Manifests) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v2/" {
		return
	}
	m.mu.Lock()
	b, ok := m.byPath[r.URL.Path]
	m.mu.Unlock()
	if !ok {
		http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	sum := sha256.Sum256(b)
	w.Header().Set("Content-Type", schema2)
	w.Header().Set("Docker-Content-Digest", "sha256:"+hex.EncodeToString(sum[:]))
	w.Write(b)
}

// Stop stops the registry.
func (m *Manifests) Stop() error { return m.srv.Close() }
