package agent

import (
	"slices"
	"testing"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

func TestLayerPulls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }
	statuses := []*contentapi.Status{
		{Ref: "layer-sha256:bb", Expected: "sha256:bbbbbbbbbbbbbbbbbbbbbbbb", Offset: 30 << 20, Total: 100 << 20, StartedAt: at(0), UpdatedAt: at(3 * time.Second)},
		// As containerd's namespaced store lists them: the digest in the ref only.
		{Ref: "layer-sha256:aaaaaaaaaaaaaaaaaaaaaaaa", Offset: 0, Total: 5 << 20, StartedAt: at(time.Second), UpdatedAt: at(time.Second)},
		{Ref: "upload-1", Offset: 10, Total: 100},                         // no digest: not a pull
		{Ref: "layer-x", Expected: "sha256:cccccccccccccccc", Offset: 10}, // no size
	}
	want := []v1alpha1.LayerPull{
		{Digest: "aaaaaaaaaaaaaaaa", Done: 0, Size: 5 << 20},
		{Digest: "bbbbbbbbbbbbbbbb", Done: 30 << 20, Size: 100 << 20, BytesPerSecond: 10 << 20},
	}
	if got := LayerPulls(statuses); !slices.Equal(got, want) {
		t.Errorf("LayerPulls =\n%+v\nwant\n%+v", got, want)
	}
}

// A layer that finished is reported whole while others fetch, for a
// minute; with nothing fetching nothing is reported.
func TestPullTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := v1alpha1.LayerPull{Digest: "aaaaaaaaaaaaaaaa", Done: 1, Size: 10, BytesPerSecond: 5}
	b := v1alpha1.LayerPull{Digest: "bbbbbbbbbbbbbbbb", Done: 2, Size: 20}
	aDone := v1alpha1.LayerPull{Digest: a.Digest, Done: 10, Size: 10, BytesPerSecond: 5}
	var tr pullTracker
	for _, step := range []struct {
		name    string
		current []v1alpha1.LayerPull
		after   time.Duration
		want    []v1alpha1.LayerPull
	}{
		{"two fetching", []v1alpha1.LayerPull{a, b}, 0, []v1alpha1.LayerPull{a, b}},
		{"a finished", []v1alpha1.LayerPull{b}, 2 * time.Second, []v1alpha1.LayerPull{aDone, b}},
		{"a still shown", []v1alpha1.LayerPull{b}, 50 * time.Second, []v1alpha1.LayerPull{aDone, b}},
		{"a forgotten after a minute", []v1alpha1.LayerPull{b}, 63 * time.Second, []v1alpha1.LayerPull{b}},
		{"nothing fetching", nil, 64 * time.Second, nil},
		{"a new pull starts afresh", []v1alpha1.LayerPull{a}, 65 * time.Second, []v1alpha1.LayerPull{a}},
	} {
		if got := tr.look(step.current, t0.Add(step.after)); !slices.Equal(got, step.want) {
			t.Errorf("%s: look =\n%+v\nwant\n%+v", step.name, got, step.want)
		}
	}
}
