package sandbox_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/sandbox"
)

// A server in the sandbox is reached in the cluster at the sandbox's own
// hostname: Agent Sandbox gives every Sandbox a headless Service.
func ExampleHandle_Endpoint() {
	h := &sandbox.Handle{TaskID: "django-11099", Namespace: "rl", Claim: "c-7f3a", Sandbox: "s-7f3a", Hostname: "s-7f3a"}
	fmt.Println(h.Endpoint(8000))
	// Output: s-7f3a.rl:8000
}
