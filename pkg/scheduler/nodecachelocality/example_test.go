package nodecachelocality_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/scheduler/nodecachelocality"
)

// A kube-scheduler build registers the plugin under its name, as
// cmd/asrl-scheduler does with app.WithPlugin(nodecachelocality.Name,
// nodecachelocality.New), and a profile enables it by that name.
func Example() {
	fmt.Println(nodecachelocality.Name)
	// Output: NodeCacheLocality
}
