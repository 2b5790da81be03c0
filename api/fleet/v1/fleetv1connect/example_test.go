package fleetv1connect_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
)

// A client with no generated code calls a method by POSTing its request
// as JSON to the method's procedure path, as the Python client does.
func Example() {
	fmt.Println("POST", fleetv1connect.FleetServiceAcquireProcedure)
	// Output: POST /sandboxfleet.fleet.v1.FleetService/Acquire
}
