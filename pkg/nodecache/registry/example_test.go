package registry_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

// The layers of an image no node holds yet come from its registry: here
// go-containerregistry's, in memory on loopback, holding an image of
// three layers.
func ExampleLayers_Get() {
	srv := httptest.NewServer(ggcrregistry.New())
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/swebench/astropy:1"
	img, err := random.Image(1024, 3)
	if err != nil {
		panic(err)
	}
	tag, err := name.ParseReference(ref)
	if err != nil {
		panic(err)
	}
	if err := remote.Write(tag, img); err != nil {
		panic(err)
	}

	layers, err := (&registry.Layers{}).Get(context.Background(), ref)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(layers), "layers,", len(layers[0].Digest), "hex digits each, as a NodeImageCache lists them")
	// Output: 3 layers, 16 hex digits each, as a NodeImageCache lists them
}
