package swebench

import (
	"context"
	"reflect"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

// A reader of layers sees an image's layers as a NodeImageCache of a node
// holding it lists them.
func TestManifests(t *testing.T) {
	m, err := StartManifests()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	img := In(m.Host, "f", 3, 7)
	if err := m.Add(img); err != nil {
		t.Fatal(err)
	}
	got, err := (&registry.Layers{}).Get(context.Background(), img.Name)
	if err != nil {
		t.Fatal(err)
	}
	if want := NodeCache("n", []Image{img}).Layers; !reflect.DeepEqual(got, want) {
		t.Errorf("layers %+v, want %+v", got, want)
	}
	if err := m.Add(Of("f", 0, 0)); err == nil {
		t.Error("an image of another registry was added")
	}
}
