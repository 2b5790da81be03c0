package inventory_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// The caches read in full are those of the nodes with the most left to
// fetch, up to the cap; the rest are shown by their sums.
func TestPullReads(t *testing.T) {
	fetching := map[string]nodecache.Pull{
		"a": {Done: 10, Size: 100},
		"b": {Done: 0, Size: 500},
		"c": {Done: 450, Size: 500},
		"d": {Done: 0, Size: 100},
	}
	for _, tt := range []struct {
		max    int
		full   []string
		summed []string
	}{
		{32, []string{"b", "d", "a", "c"}, nil},
		{2, []string{"b", "d"}, []string{"a", "c"}},
		{0, nil, []string{"a", "b", "c", "d"}},
	} {
		full, summed := inventory.PullReads(fetching, tt.max)
		if !slices.Equal(full, tt.full) || !slices.Equal(slices.Sorted(maps.Keys(summed)), tt.summed) {
			t.Errorf("max %d: full %v, summed %v; want %v, %v", tt.max, full, slices.Sorted(maps.Keys(summed)), tt.full, tt.summed)
		}
		for node, p := range summed {
			if p != fetching[node] {
				t.Errorf("max %d: %s summed as %+v, want its annotation's %+v", tt.max, node, p, fetching[node])
			}
		}
	}
}
