package capacity

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestTakenOf(t *testing.T) {
	pod := func(node string, phase corev1.PodPhase, cpu, memory string, init ...string) corev1.Pod {
		p := corev1.Pod{Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}}}}},
			Status: corev1.PodStatus{Phase: phase}}
		for _, c := range init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(c)}}})
		}
		return p
	}
	got := TakenOf([]corev1.Pod{
		pod("a", corev1.PodRunning, "500m", "1Gi"),
		pod("a", corev1.PodPending, "250m", "1Gi"),
		// An init container asking more than the containers sets the Pod's request.
		pod("b", corev1.PodRunning, "100m", "0", "2"),
		// Ended Pods and unbound ones take nothing.
		pod("a", corev1.PodSucceeded, "4", "8Gi"),
		pod("b", corev1.PodFailed, "4", "8Gi"),
		pod("", corev1.PodPending, "4", "8Gi"),
	})
	want := map[string]Taken{
		"a": {CPUMilli: 750, MemoryBytes: 2 << 30, Pods: 2},
		"b": {CPUMilli: 2000, MemoryBytes: 0, Pods: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("TakenOf = %+v, want %+v", got, want)
	}
	for node, w := range want {
		if got[node] != w {
			t.Errorf("node %s: taken %+v, want %+v", node, got[node], w)
		}
	}
}

func TestHold(t *testing.T) {
	sb := Sandbox{CPUMilli: 1000, MemoryBytes: 1 << 30}
	node := func(cpuMilli, memGiB, pods int64) Node {
		return Node{CPUMilli: cpuMilli, MemoryBytes: memGiB << 30, Pods: pods}
	}
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  int
	}{
		{"by CPU", []Node{node(4000, 32, 110)}, 4},
		{"by memory", []Node{node(16000, 3, 110)}, 3},
		{"by pods", []Node{node(16000, 32, 2)}, 2},
		// Three nodes of 1.5 CPUs have 4.5 CPUs, but hold 3 sandboxes of 1.
		{"each node apart", []Node{node(1500, 8, 110), node(1500, 8, 110), node(1500, 8, 110)}, 3},
		{"what the Pods there leave", []Node{node(5000, 32, 110).Left(Taken{CPUMilli: 1100, MemoryBytes: 1 << 30, Pods: 3})}, 3},
		{"nothing below zero", []Node{node(1000, 1, 110).Left(Taken{CPUMilli: 3000, MemoryBytes: 2 << 30, Pods: 200}), node(2000, 8, 110)}, 2},
		{"no nodes", nil, 0},
	} {
		if got := Hold(tc.nodes, sb); got != tc.want {
			t.Errorf("%s: Hold = %d, want %d", tc.name, got, tc.want)
		}
	}
}
