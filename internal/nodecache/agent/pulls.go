package agent

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"google.golang.org/grpc/metadata"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Pulls lists the blobs the runtime is fetching: the ingests of
// containerd's content store, which a pull writes each layer through.
func (r *Runtime) Pulls(ctx context.Context) ([]v1alpha1.LayerPull, error) {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "containerd-namespace", containerdNamespace), callTimeout)
	defer cancel()
	resp, err := r.content.ListStatuses(ctx, &contentapi.ListStatusesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing containerd's ingests: %w", err)
	}
	return LayerPulls(resp.GetStatuses()), nil
}

// LayerPulls makes the pulls of containerd's ingest statuses, by digest:
// the bytes written of the expected size, and the rate since the ingest
// began. The digest is the expected one, which containerd's namespaced
// store does not list, or else the one in the ingest's ref, which a pull
// names after it ("layer-sha256:..."). Ingests that name no digest or
// size are left out.
func LayerPulls(statuses []*contentapi.Status) []v1alpha1.LayerPull {
	var pulls []v1alpha1.LayerPull
	for _, st := range statuses {
		digest := st.GetExpected()
		if digest == "" {
			if i := strings.Index(st.GetRef(), "sha256:"); i >= 0 {
				digest = st.GetRef()[i:]
			}
		}
		if !strings.HasPrefix(digest, "sha256:") || st.GetTotal() <= 0 {
			continue
		}
		p := v1alpha1.LayerPull{Digest: nodecache.Short(digest), Done: st.GetOffset(), Size: st.GetTotal()}
		if took := st.GetUpdatedAt().AsTime().Sub(st.GetStartedAt().AsTime()); st.GetStartedAt() != nil && st.GetUpdatedAt() != nil && took > 0 {
			p.BytesPerSecond = int64(float64(p.Done) / took.Seconds())
		}
		pulls = append(pulls, p)
	}
	slices.SortFunc(pulls, func(a, b v1alpha1.LayerPull) int { return cmp.Compare(a.Digest, b.Digest) })
	return pulls
}

// finishedKept is how long a layer that finished fetching is still
// reported, whole, while others fetch: its ingest is gone, and the
// NodeImageCache lists it only once its image is complete, so without it
// a reader's count of an image's bytes would fall back as layers land.
const finishedKept = time.Minute

// pullTracker remembers the layers seen fetching in earlier looks.
type pullTracker struct {
	last     map[string]v1alpha1.LayerPull
	finished map[string]time.Time
}

// look takes the ingests seen at now and returns the pulls to report:
// those, and the layers seen fetching before that have finished since,
// within finishedKept, as Done == Size. With nothing fetching there is
// nothing to report.
func (t *pullTracker) look(current []v1alpha1.LayerPull, now time.Time) []v1alpha1.LayerPull {
	if len(current) == 0 {
		t.last, t.finished = nil, nil
		return nil
	}
	if t.finished == nil {
		t.finished = map[string]time.Time{}
	}
	fetching := make(map[string]v1alpha1.LayerPull, len(current))
	for _, p := range current {
		fetching[p.Digest] = p
		delete(t.finished, p.Digest)
	}
	for d, p := range t.last {
		if _, still := fetching[d]; still {
			continue
		}
		if _, known := t.finished[d]; !known {
			t.finished[d] = now
		}
		fetching[d] = v1alpha1.LayerPull{Digest: d, Done: p.Size, Size: p.Size, BytesPerSecond: p.BytesPerSecond}
	}
	maps.DeleteFunc(t.finished, func(d string, at time.Time) bool {
		if now.Sub(at) > finishedKept {
			delete(fetching, d)
			return true
		}
		return false
	})
	t.last = fetching
	return slices.SortedFunc(maps.Values(fetching), func(a, b v1alpha1.LayerPull) int { return cmp.Compare(a.Digest, b.Digest) })
}
