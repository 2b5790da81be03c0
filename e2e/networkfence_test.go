package e2e

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testlog"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// connects, run by python3 in a Pod, tries a TCP connection to each
// host:port it is given and prints one line for each: the target, then
// "open" or "closed" and why.
const connects = `
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print(target, "open", flush=True)
    except OSError as e:
        print(target, "closed", type(e).__name__, flush=True)
`

// sandboxesAreFenced: under the sample policy as shipped, the webhook
// writes the governed namespace's fence, and the real node's network
// plugin holds it. A sandbox there — a Sandbox's Pod — connects to none
// of the webhook's Pod, the API server (at the kubernetes Service, as
// in-cluster clients reach it) and a Pod of another namespace, while a
// Pod of an ungoverned namespace reaches every one; and it reaches the
// mirror a second policy governing the namespace lists: the policies'
// fences add up.
func sandboxesAreFenced(t *testing.T, ctx context.Context, c client.Client, governed string) {
	webhookPods := &corev1.PodList{}
	if err := c.List(ctx, webhookPods, client.InNamespace("sandbox-fleet-system"), client.MatchingLabels{"app.kubernetes.io/name": "asrl-webhook"}); err != nil || len(webhookPods.Items) == 0 {
		t.Fatalf("the webhook's Pods: %v (%d)", err, len(webhookPods.Items))
	}
	elsewhere, mirrors := newNamespace(t), newNamespace(t)
	other := runPod(t, ctx, c, elsewhere, "server", "python3", "-m", "http.server", "8080")
	mirror := runPod(t, ctx, c, mirrors, "mirror", "python3", "-m", "http.server", "8080")
	port := intstr.FromInt32(8080)
	mirrorPolicy := &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "mirror-" + governed}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: governed}},
		Network: &v1alpha1.NetworkIsolation{Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: mirrors}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
		}}},
	}}
	if err := c.Create(ctx, mirrorPolicy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), mirrorPolicy) })
	for _, name := range []string{"baseline", mirrorPolicy.Name} {
		np := &networkingv1.NetworkPolicy{}
		key := client.ObjectKey{Namespace: governed, Name: policy.NetworkPolicyName(name)}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return c.Get(ctx, key, np) == nil, nil
		}); err != nil {
			t.Fatalf("the webhook did not write NetworkPolicy %s: %v", key, err)
		}
	}

	sandbox := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: governed, Name: "fenced"}}
	sandbox.Spec.PodTemplate.Spec = corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelHostname: local.RealNodeName()},
		// Within the real node: a container without limits gets the
		// sample policy's caps, more than the node has.
		Containers: []corev1.Container{{Name: "sandbox", Image: testimages.Problem(1), Command: []string{"sleep", "600"},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
	}
	if err := c.Create(ctx, sandbox); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), sandbox) })
	inside := waitRunning(t, ctx, c, governed, func(p *corev1.Pod) bool { return p.Name == sandbox.Name && p.Labels[policy.SandboxPodLabel] != "" })
	outside := runPod(t, ctx, c, elsewhere, "control", "sleep", "600")

	webhook := net.JoinHostPort(webhookPods.Items[0].Status.PodIP, "9443")
	apiServer := apiServerService(t, ctx)
	otherPod := net.JoinHostPort(other.Status.PodIP, "8080")
	mirrorPod := net.JoinHostPort(mirror.Status.PodIP, "8080")
	targets := []string{webhook, apiServer, otherPod, mirrorPod}
	for _, tt := range []struct {
		from *corev1.Pod
		want map[string]string
	}{
		{outside, map[string]string{webhook: "open", apiServer: "open", otherPod: "open", mirrorPod: "open"}},
		{inside, map[string]string{webhook: "closed", apiServer: "closed", otherPod: "closed", mirrorPod: "open"}},
	} {
		// The plugin writes a Pod's rules once it sees the Pod: a moment
		// after it runs.
		var got map[string]string
		var said string
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, said = tryConnecting(t, ctx, tt.from, targets)
			for target, want := range tt.want {
				if got[target] != want {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("from %s/%s (webhook %s, API server %s, another namespace's Pod %s, the listed mirror %s):\n%s", tt.from.Namespace, tt.from.Name, webhook, apiServer, otherPod, mirrorPod, said)
		}
	}
}

// tryConnecting runs connects in pod's first container and returns what
// became of each target, with its output.
// apiServerService is where in-cluster clients reach the API server: the
// kubernetes Service's address and port.
func apiServerService(t *testing.T, ctx context.Context) string {
	t.Helper()
	svc, err := kubeClient(t).CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(svc.Spec.Ports) == 0 {
		t.Fatalf("the kubernetes Service: %v", err)
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))
}

func tryConnecting(t *testing.T, ctx context.Context, pod *corev1.Pod, targets []string) (map[string]string, string) {
	t.Helper()
	clients, err := kube.ForConfig(restConfig(), pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	// Written by the exec's streams, which may outlive a call cut short.
	var out, stderr testlog.Buffer
	code, err := exec.Run(ctx, clients.Config, clients.Kube, exec.Request{Namespace: pod.Namespace, Pod: pod.Name, Container: pod.Spec.Containers[0].Name,
		Command: append([]string{"python3", "-c", connects}, targets...), Stdout: &out, Stderr: &stderr})
	if err != nil || code != 0 {
		t.Fatalf("python3 in %s/%s: exit %d, %v\n%s%s", pod.Namespace, pod.Name, code, err, out.String(), stderr.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			got[f[0]] = f[1]
		}
	}
	return got, out.String()
}

// runPod runs a Pod of the problem image (python3) on the real node with
// command, and returns it once it runs.
func runPod(t *testing.T, ctx context.Context, c client.Client, ns, name string, command ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelHostname: local.RealNodeName()},
		Containers:   []corev1.Container{{Name: "c", Image: testimages.Problem(1), Command: command}},
	}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return waitRunning(t, ctx, c, ns, func(p *corev1.Pod) bool { return p.Name == name })
}

// waitRunning waits for the one Pod of ns that match selects to run, with
// an IP, and returns it.
func waitRunning(t *testing.T, ctx context.Context, c client.Client, ns string, match func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; match(p) {
				found = p
				return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("a Pod of %s did not run: %v (%+v)", ns, err, found)
	}
	return found
}
