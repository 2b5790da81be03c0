package fleetv1_test

import (
	"fmt"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
)

// The generated getters are safe on missing messages: a response without
// a handle reads as empty fields, not a nil dereference.
func ExampleAcquireResponse_GetHandle() {
	resp := &fleetv1.AcquireResponse{Handle: &fleetv1.Handle{Id: "claim-1", Node: "node-7", Resets: 2}}
	fmt.Println(resp.GetHandle().GetNode(), resp.GetHandle().GetResets())
	var none *fleetv1.AcquireResponse
	fmt.Printf("%q %d\n", none.GetHandle().GetNode(), none.GetHandle().GetResets())
	// Output:
	// node-7 2
	// "" 0
}
