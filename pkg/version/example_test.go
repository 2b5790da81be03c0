package version_test

import (
	"fmt"
	"runtime"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/version"
)

// Get says which build runs: the release's version and commit, set when it
// is built (make build), or the module's as go install records them.
func ExampleGet() {
	v := version.Get()
	fmt.Println(v.GoVersion == runtime.Version(), v.Platform == runtime.GOOS+"/"+runtime.GOARCH)
	// Output: true true
}
