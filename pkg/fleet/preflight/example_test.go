package preflight_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
)

// A controller older than every tested release is warned about; a newer
// release of a tested line, or a version that cannot be read, is not.
func ExampleOlderThanTested() {
	for _, v := range []string{"v0.1.0", preflight.TestedAgentSandbox[len(preflight.TestedAgentSandbox)-1], "unknown"} {
		fmt.Printf("%s warned: %v\n", v, preflight.OlderThanTested(preflight.ControllerVersion{Version: v}) != "")
	}
	// Output:
	// v0.1.0 warned: true
	// v1.0.1 warned: false
	// unknown warned: false
}
