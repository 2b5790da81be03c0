package labels_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// Every object a run creates carries its run id; everything finds a run's
// objects by it.
func ExampleRunSelector() {
	fmt.Println(labels.RunSelector("run-20261203-084127-d120fd"))
	// Output: app.kubernetes.io/managed-by=sandbox-fleet,sandbox-fleet.io/run-id=run-20261203-084127-d120fd
}
