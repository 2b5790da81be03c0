package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// A server may refuse a write before reading its body. The write must not
// return while its encoder still reads the object, which the agent clears
// right after (the race detector saw it do so). The server is an
// httptest one: the real API server cannot be made to answer early on
// demand.
func TestWriteEndsItsEncodingBeforeReturning(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`)
	}))
	defer srv.Close()
	c, err := NewClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	cache := &v1alpha1.NodeImageCache{}
	cache.Name, cache.ResourceVersion = "node", "1"
	// Megabytes of JSON: more than the connection buffers before the
	// server's answer arrives.
	for i := range 100_000 {
		cache.Layers = append(cache.Layers, v1alpha1.Layer{Digest: fmt.Sprintf("%016x", i), Size: int64(i)})
		cache.Images = append(cache.Images, v1alpha1.CachedImage{Layers: []int32{int32(i)}})
	}
	for range 3 {
		if err := c.update(context.Background(), cache); err == nil {
			t.Fatal("update succeeded against a server that refuses it")
		}
		// What the agent does after every write.
		layers, images := cache.Layers, cache.Images
		cache.Layers, cache.Images = nil, nil
		cache.Layers, cache.Images = layers, images
	}
}
