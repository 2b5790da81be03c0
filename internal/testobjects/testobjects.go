// Package testobjects builds the objects of runs as the fleet and the
// Agent Sandbox controller leave them — templates, warm pools, claims,
// sandbox Pods, events — for tests of what reads them, such as printers.
package testobjects

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// RunBuilder builds the objects of one run into an inventory.
type RunBuilder struct {
	inv       *inventory.Inventory
	namespace string
	runID     string
	created   time.Time
	pods      int
}

// MakeRun starts run runID in namespace, its first object created at
// created, adding to inv.
func MakeRun(inv *inventory.Inventory, namespace, runID string, created time.Time) *RunBuilder {
	return &RunBuilder{inv: inv, namespace: namespace, runID: runID, created: created}
}

func (b *RunBuilder) meta(name string, after time.Duration) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: b.namespace, Labels: labels.ForRun(b.runID),
		CreationTimestamp: metav1.NewTime(b.created.Add(after))}
}

// Pool adds a template and a warm pool of image asked for replicas, and a
// Pod on each of nodes ("" for one not yet scheduled); the Pods on a node
// are Ready, the rest Pending with waiting (e.g. ImagePullBackOff) when it
// is given.
func (b *RunBuilder) Pool(name, image string, replicas int32, waiting string, nodes ...string) *RunBuilder {
	tmpl := extensionsv1beta1.SandboxTemplate{ObjectMeta: b.meta(name, 0)}
	tmpl.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "sandbox", Image: image}}
	pool := extensionsv1beta1.SandboxWarmPool{ObjectMeta: b.meta(name, time.Second)}
	pool.Spec.Replicas = &replicas
	pool.Spec.TemplateRef.Name = name
	for _, node := range nodes {
		pod := b.pod(name, node, waiting)
		if node != "" {
			pool.Status.ReadyReplicas++
		}
		b.inv.Pods = append(b.inv.Pods, pod)
	}
	pool.Status.Replicas = int32(len(nodes))
	b.inv.Templates = append(b.inv.Templates, tmpl)
	b.inv.Pools = append(b.inv.Pools, pool)
	return b
}

func (b *RunBuilder) pod(pool, node, waiting string) corev1.Pod {
	b.pods++
	name := fmt.Sprintf("%s-%d", pool, b.pods)
	pod := corev1.Pod{ObjectMeta: b.meta(name, 2*time.Second)}
	pod.Labels = map[string]string{labels.RunID: b.runID, labels.ManagedBy: labels.ManagedByValue, labels.Pool: pool}
	controller := true
	pod.OwnerReferences = []metav1.OwnerReference{{Kind: "Sandbox", Name: name, Controller: &controller}}
	pod.Spec.NodeName = node
	pod.Status.Phase = corev1.PodPending
	if node != "" {
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = fmt.Sprintf("10.244.0.%d", b.pods)
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	} else if waiting != "" {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: waiting, Message: "Back-off pulling image"}}}}
	}
	return pod
}

// PullingPool adds a pool of one sandbox whose Pod, on node, waits for its
// image to be pulled.
func (b *RunBuilder) PullingPool(name, image, node string) *RunBuilder {
	b.Pool(name, image, 1, "")
	pod := b.pod(name, node, "")
	pod.Spec.Containers = []corev1.Container{{Name: "sandbox", Image: image}}
	pod.Status.Phase, pod.Status.PodIP, pod.Status.Conditions = corev1.PodPending, "", nil
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	b.inv.Pods = append(b.inv.Pods, pod)
	b.inv.Pools[len(b.inv.Pools)-1].Status.Replicas = 1
	return b
}

// Claim adds a claim for task on pool, bound to the pool's Pod number pod
// (counted from 1 over the run's Pods; 0 for none yet).
func (b *RunBuilder) Claim(name, task, pool string, pod int) *RunBuilder {
	c := extensionsv1beta1.SandboxClaim{ObjectMeta: b.meta(name, time.Minute)}
	c.Annotations = map[string]string{labels.TaskID: task}
	c.Spec.WarmPoolRef.Name = pool
	if pod > 0 {
		sandbox := fmt.Sprintf("%s-%d", pool, pod)
		c.Status.SandboxStatus.Name = sandbox
		for _, p := range b.inv.Pods {
			if p.Name == sandbox && kube.PodReady(&p) {
				c.Status.Conditions = []metav1.Condition{{Type: string(sandboxv1beta1.SandboxConditionReady), Status: metav1.ConditionTrue}}
			}
		}
	}
	b.inv.Claims = append(b.inv.Claims, c)
	return b
}

// Event returns an event of type about the run's object kind/name at at.
func (b *RunBuilder) Event(kind, name, typ, reason, message string, at time.Time) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name + "." + reason, Namespace: b.namespace},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name, Namespace: b.namespace},
		Type:           typ, Reason: reason, Message: message, LastTimestamp: metav1.NewTime(at),
	}
}
