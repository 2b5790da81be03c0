// Package fleetv1 is the Go code generated from the fleet session API,
// api/fleet/v1/fleet.proto: what `kubectl sandbox-fleet serve` offers a
// training loop. Its messages are plain protobuf messages; a Go trainer
// calls the service through pkg/fleetclient, a Python one through
// clients/python, which needs no generated code.
package fleetv1
