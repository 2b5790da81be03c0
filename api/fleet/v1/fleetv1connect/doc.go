// Package fleetv1connect is the Connect code generated from the fleet
// session API (api/fleet/v1/fleet.proto): the service's client, which
// pkg/fleetclient dials, and its handler, which `kubectl sandbox-fleet
// serve` serves.
package fleetv1connect
