package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// A warm pool of busybox sandboxes on the real node; a claim adopts one;
// exec through the API server carries stdout, stderr, the exit code and
// stdin, over WebSocket and over SPDY.
func TestWarmPoolClaimAndExec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	task := tasks.Task{ID: "task-1", Image: testimages.Busybox}
	clients, f := openFleet(t, ctx, "e2e-exec", []tasks.Task{task}, nil)
	ns := clients.Namespace
	if err := f.Warm(ctx, []string{task.Image}, replicas(2)); err != nil {
		t.Fatal(err)
	}
	h, err := f.Acquire(ctx, task, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := clients.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Pod}, pod); err != nil {
		t.Fatal(err)
	}
	// Adopted from the warm pool, not started for the claim.
	// The controller records on the Sandbox whether it was warm.
	sandbox := &sandboxv1beta1.Sandbox{}
	if err := clients.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Sandbox}, sandbox); err != nil {
		t.Fatal(err)
	}
	if got := sandbox.Labels["agents.x-k8s.io/launch-type"]; got != "warm" {
		t.Errorf("sandbox %s launch type %q: the claim did not adopt a warm sandbox", sandbox.Name, got)
	}
	if pod.Spec.NodeName == "" || pod.Spec.Containers[0].Image != testimages.Busybox {
		t.Errorf("pod %s: node %q image %q", pod.Name, pod.Spec.NodeName, pod.Spec.Containers[0].Image)
	}

	for _, p := range []struct {
		name     string
		protocol exec.Protocol
	}{{"websocket-with-fallback", exec.WebSocketWithFallback}, {"websocket", exec.WebSocket}, {"spdy", exec.SPDY}} {
		t.Run(p.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code, err := exec.Run(ctx, clients.Config, clients.Kube, exec.Request{
				Namespace: ns, Pod: pod.Name, Container: resources.ContainerName,
				Command: []string{"sh", "-c", "echo out; echo err >&2; exit 7"},
				Stdout:  &stdout, Stderr: &stderr, Protocol: p.protocol,
			})
			if err != nil || code != 7 || stdout.String() != "out\n" || stderr.String() != "err\n" {
				t.Errorf("exec: code %d err %v stdout %q stderr %q; want 7, nil, \"out\\n\", \"err\\n\"", code, err, stdout.String(), stderr.String())
			}

			input := strings.Repeat("sandbox-fleet ", 1000)
			stdout.Reset()
			code, err = exec.Run(ctx, clients.Config, clients.Kube, exec.Request{
				Namespace: ns, Pod: pod.Name, Container: resources.ContainerName,
				Command: []string{"wc", "-c"}, Stdin: strings.NewReader(input), Stdout: &stdout, Protocol: p.protocol,
			})
			if err != nil || code != 0 || strings.TrimSpace(stdout.String()) != fmt.Sprint(len(input)) {
				t.Errorf("exec -i wc -c: code %d err %v stdout %q; want %d bytes counted", code, err, stdout.String(), len(input))
			}
		})
	}
}

// The container-waiting reasons that fail-fast logic keys on.
func TestImageFailuresReportTheirReason(t *testing.T) {
	ns := newNamespace(t)
	kc := kubeClient(t)
	for _, tt := range []struct {
		name, image string
		reasons     []string
	}{
		{"invalid-name", "docker.io/library/Busybox:UPPER:case", []string{"InvalidImageName"}},
		{"missing-tag", "docker.io/library/busybox:no-such-tag", []string{"ErrImagePull", "ImagePullBackOff"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: tt.name},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: tt.image}},
					TerminationGracePeriodSeconds: new(int64(0))},
			}
			if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			reason := waitForWaitingReason(ctx, t, kc, ns, tt.name, tt.reasons)
			t.Logf("%s: %s", tt.image, reason)
		})
	}
}

// waitForWaitingReason watches a pod until its container waits for one of
// reasons, and returns it.
func waitForWaitingReason(ctx context.Context, t *testing.T, kc kubernetes.Interface, ns, name string, reasons []string) string {
	t.Helper()
	w, err := kc.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s never waited for %v; last state %s", name, reasons, last)
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch of pod %s closed", name)
			}
			if ev.Type == watch.Error {
				t.Fatalf("watching pod %s: %v", name, ev.Object)
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, cs := range pod.Status.ContainerStatuses {
				if cs.State.Waiting != nil {
					last = cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
					if slices.Contains(reasons, cs.State.Waiting.Reason) {
						return cs.State.Waiting.Reason
					}
				}
			}
		}
	}
}

// After a pull, the node reports the image in status.images, with its
// size, in the kubelet's periodic status update; on the local cluster its
// layers and sizes can be read through the node's CRI socket too.
func TestNodeReportsPulledImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	kc := kubeClient(t)
	image := testimages.Problem(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "problem"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image, Command: []string{"sleep", "infinity"}}},
			TerminationGracePeriodSeconds: new(int64(0))},
	}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// On whichever node it runs: the local cluster's real node, or one of
	// another cluster's.
	var node string
	for node == "" {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning {
			node = p.Spec.NodeName
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s never ran: %+v", pod.Name, p.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
	w, err := kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The kubelet publishes its image list with its periodic status update.
	for listed := false; !listed; {
		select {
		case <-ctx.Done():
			t.Fatalf("node %s never listed %s in status.images", node, image)
		case ev := <-w.ResultChan():
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			for _, img := range n.Status.Images {
				if slices.Contains(img.Names, image) && img.SizeBytes > 0 {
					listed = true
				}
			}
		}
	}

	// The layers are read through the node's CRI socket, which only the
	// local cluster's node exposes to this process.
	if local == nil {
		return
	}
	images, err := criclient.NewRemoteImageService(ctx, "unix://"+local.CRISocket(), 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	status, err := images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, true)
	if err != nil || status.Image == nil {
		t.Fatalf("CRI ImageStatus %s: %v %+v", image, err, status)
	}
	var info struct {
		ImageSpec struct {
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			} `json:"rootfs"`
		} `json:"imageSpec"`
	}
	if err := json.Unmarshal([]byte(status.Info["info"]), &info); err != nil {
		t.Fatalf("verbose image info: %v", err)
	}
	if n := len(info.ImageSpec.RootFS.DiffIDs); n != 3 || status.Image.Size == 0 {
		t.Errorf("image %s: %d layers, %d bytes; want the 3 layers of a problem image and a size", image, n, status.Image.Size)
	}
}
