package config_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
)

// Parse reads a configuration file, fills in the defaults, and says where
// a mistake is.
func ExampleParse() {
	cfg, err := config.Parse("fleet.yaml", []byte("apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nstrategy: pipelined\nmaxConcurrent: 16\n"))
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.Strategy, cfg.MaxConcurrent, cfg.MaxWarmPoolSize, cfg.ReadyTimeout.Duration)

	_, err = config.Parse("fleet.yaml", []byte("apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nstrategi: pipelined\n"))
	fmt.Println(err)
	// Output:
	// pipelined 16 8 15m0s
	// fleet.yaml:3: strategi: unknown field (see the documented fields in examples/fleet.yaml)
}
