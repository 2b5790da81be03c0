package fleet

import (
	"context"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/capacity"
)

// crowded reports whether the nodes the run's sandboxes may run on hold
// fewer sandboxes at once than the plan's peak: the tasks in flight and,
// under a strategy that warms ahead, the pools of two windows. On such
// nodes a window's warm-ahead, made as the window starts, takes the slots
// the window's own cold claims wait for, and a task waits for another to
// end instead of for a sandbox to start. What the nodes hold is what the
// Pods already on them leave (a DaemonSet's, another run's), or, where
// the user may not list Pods across the cluster, their allocatable. It is
// false where a cluster's nodes cannot be read, or none is there yet (an
// autoscaled cluster's nodes come for the Pods that wait).
func (f *Fleet) crowded(ctx context.Context) bool {
	sb := capacity.SandboxOf(f.cfg.Template.Resources.Requests)
	hold := 0
	for _, c := range f.clusters {
		probe, err := capacity.ReadNodes(ctx, c.Clients.Client, c.Name, c.spec.NodeSelector)
		if err != nil || len(probe.Nodes) == 0 {
			f.log.V(1).Info("The nodes' room is unknown: each window warms the next as it starts", "cluster", c.Name, "err", err)
			return false
		}
		taken, err := capacity.ReadTaken(ctx, c.Clients.Client, c.Name)
		if err != nil {
			f.log.V(1).Info("What the Pods on the nodes take is unknown: counting the nodes' allocatable", "cluster", c.Name, "err", err)
		}
		nodes := probe.Nodes
		for i, n := range nodes {
			nodes[i] = n.Left(taken[n.Name])
		}
		hold += capacity.Hold(nodes, sb)
	}
	peak := f.plan.Peak.Pods
	if peak <= hold {
		return false
	}
	f.log.Info("The nodes hold fewer sandboxes than the run's peak: each window warms the next once its own tasks all have sandboxes, so that its warm-ahead takes no slot they wait for",
		"peak", peak, "nodesHold", hold)
	return true
}
