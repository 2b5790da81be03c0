package capacity

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Taken is what the Pods bound to a node request of it, as the scheduler
// counts them: a Pod's containers (its init containers' peak, sidecars,
// overhead and Pod-level requests included) until it ends.
type Taken struct {
	CPUMilli    int64
	MemoryBytes int64
	Pods        int64
}

// TakenOf sums, by node name, the requests of the pods bound to a node
// that have not ended.
func TakenOf(pods []corev1.Pod) map[string]Taken {
	taken := map[string]Taken{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		r := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		t := taken[p.Spec.NodeName]
		t.CPUMilli += r.Cpu().MilliValue()
		t.MemoryBytes += r.Memory().Value()
		t.Pods++
		taken[p.Spec.NodeName] = t
	}
	return taken
}

// Left is what n leaves for more Pods once those bound to it take what
// they request; none of it below zero.
func (n Node) Left(t Taken) Node {
	n.CPUMilli = max(n.CPUMilli-t.CPUMilli, 0)
	n.MemoryBytes = max(n.MemoryBytes-t.MemoryBytes, 0)
	n.Pods = max(n.Pods-t.Pods, 0)
	return n
}

// Hold is how many sandboxes the nodes hold at once: each node's fit
// apart, since a sandbox does not span nodes.
func Hold(nodes []Node, sb Sandbox) int {
	hold := 0
	for _, n := range nodes {
		var t Totals
		t.add(n)
		fit, _ := NewLimits(t, sb).Fit()
		hold += fit
	}
	return hold
}
