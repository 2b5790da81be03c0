package inventory_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
)

// What keeps a sandbox's Pod from being Ready, as describe run shows it.
func ExampleTrouble() {
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "sandbox",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "ImagePullBackOff", Message: `Back-off pulling image "example.com/swe/astropy:1"`}},
	}}}}
	if reason, message, ok := inventory.Trouble(pod); ok {
		fmt.Println(reason+":", message)
	}
	_, _, ok := inventory.Trouble(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	fmt.Println("a running Pod in trouble:", ok)
	// Output:
	// ImagePullBackOff: Back-off pulling image "example.com/swe/astropy:1"
	// a running Pod in trouble: false
}

// Where a run's Pods are, as get runs -o wide shows it.
func ExampleNodes() {
	on := func(node string) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}} }
	fmt.Println(inventory.Nodes([]*corev1.Pod{on("node-a"), on("node-b"), on("node-a"), on(""), on("node-a")}))
	// Output:
	// node-a (3), node-b
}
