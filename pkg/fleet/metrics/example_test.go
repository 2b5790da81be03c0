package metrics_test

import (
	"fmt"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
)

// A run's series are on a registry of its own, for the caller to serve.
func ExampleNew() {
	m := metrics.New("pipelined")
	m.Task("gke-a", true, 3*time.Second)
	m.Task("gke-a", false, time.Second)
	families, err := m.Registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() == "asrl_tasks_total" {
			for _, s := range f.GetMetric() {
				for _, l := range s.GetLabel() {
					fmt.Printf("%s=%s ", l.GetName(), l.GetValue())
				}
				fmt.Println(s.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// cluster=gke-a status=error strategy=pipelined 1
	// cluster=gke-a status=ok strategy=pipelined 1
}
