package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// forgedReview is an AdmissionReview no API server sent: a SandboxPolicy
// with an empty spec, which, were it admitted, would be written as a
// pending entry refusing every sandbox Pod of the cluster.
func forgedReview(t *testing.T, name string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": name, "operation": "CREATE", "name": name,
			"kind":     map[string]string{"group": "sandbox-fleet.io", "version": "v1alpha1", "kind": "SandboxPolicy"},
			"resource": map[string]string{"group": "sandbox-fleet.io", "version": "v1alpha1", "resource": "sandboxpolicies"},
			"object": map[string]any{"apiVersion": "sandbox-fleet.io/v1alpha1", "kind": "SandboxPolicy",
				"metadata": map[string]any{"name": name, "uid": name, "generation": 1}, "spec": map[string]any{}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postReview, run by python3 in a sandbox: it connects to the webhook,
// then sends the review over TLS without a client certificate, and says
// how far it got.
const postReview = `
import socket, ssl, sys
host, port, body = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
s = socket.create_connection((host, port), timeout=10)
print("connected", flush=True)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
try:
    t = ctx.wrap_socket(s)
    t.sendall(b"POST /validate-sandbox-policies HTTP/1.1\r\nHost: asrl-webhook\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    reply = t.recv(65536)
    print("answered", reply.split(b"\r\n")[0].decode() if reply else "nothing")
except (ssl.SSLError, OSError) as e:
    print("refused", type(e).__name__, e)
`

// onlyTheAPIServerCallsTheInstalledWebhook: the webhook as shipped, given
// the API server's client CA as docs/admin.md says, is called by nothing
// else. A sandbox Pod's forged review is refused at the handshake, and 17
// from a client whose certificate the cluster's CA signed but which is
// not the API server (past the 16 pending entries the webhook keeps) are
// too; the policies' pending entries are as before, and a sandbox Pod in
// the governed namespace ns is still admitted.
func onlyTheAPIServerCallsTheInstalledWebhook(t *testing.T, ctx context.Context, c client.Client, governed string, sandboxPod *corev1.Pod) {
	pending := func() string {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: "asrl-webhook-policies"}, m); err != nil {
			t.Fatal(err)
		}
		return m.Annotations["sandbox-fleet.io/pending-policies"] + "/" + strings.Repeat("+", len(m.Webhooks))
	}
	before := pending()
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("sandbox-fleet-system"), client.MatchingLabels{"app.kubernetes.io/name": "asrl-webhook"}); err != nil || len(pods.Items) == 0 {
		t.Fatalf("the webhook's Pods: %v (%d)", err, len(pods.Items))
	}
	webhookAddr := net.JoinHostPort(pods.Items[0].Status.PodIP, "9443")

	t.Run("from a sandbox", func(t *testing.T) {
		ns := newNamespace(t)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "attacker"}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: local.RealNodeName()},
			Containers:   []corev1.Container{{Name: "sandbox", Image: testimages.Problem(1), Command: []string{"sleep", "600"}}},
		}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod)
			return err == nil && pod.Status.Phase == corev1.PodRunning, nil
		})
		if err != nil {
			t.Fatalf("the sandbox Pod did not run: %v (%s)", err, pod.Status.Phase)
		}
		host, port, _ := net.SplitHostPort(webhookAddr)
		var out, stderr bytes.Buffer
		clients, err := kube.ForConfig(restConfig(), ns)
		if err != nil {
			t.Fatal(err)
		}
		code, err := exec.Run(ctx, clients.Config, clients.Kube, exec.Request{Namespace: ns, Pod: pod.Name, Container: "sandbox",
			Command: []string{"python3", "-c", postReview, host, port, string(forgedReview(t, "forged-from-a-sandbox"))}, Stdout: &out, Stderr: &stderr})
		if err != nil || code != 0 {
			t.Fatalf("python3 in the sandbox: exit %d, %v\n%s%s", code, err, out.String(), stderr.String())
		}
		t.Logf("the forged review from a sandbox: %s", out.String())
		if !strings.HasPrefix(out.String(), "connected\n") || strings.Contains(out.String(), "answered HTTP") {
			t.Errorf("a review from a sandbox, with no client certificate, reached the webhook:\n%s", out.String())
		}
	})

	t.Run("from a client of the cluster's CA that is not the API server", func(t *testing.T) {
		admin, err := tls.LoadX509KeyPair(filepath.Join(local.Dir(), "pki", "admin.crt"), filepath.Join(local.Dir(), "pki", "admin.key"))
		if err != nil {
			t.Fatal(err)
		}
		caller := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{admin}}}}
		var wg sync.WaitGroup
		for i := range 17 {
			wg.Go(func() {
				resp, err := caller.Post("https://"+webhookAddr+"/validate-sandbox-policies", "application/json", bytes.NewReader(forgedReview(t, fmt.Sprintf("forged-%d", i))))
				if err == nil {
					resp.Body.Close()
					t.Errorf("forged review %d was answered %d", i, resp.StatusCode)
				}
			})
		}
		wg.Wait()
	})

	if after := pending(); after != before {
		t.Errorf("forged reviews changed the pending entries: %q → %q", before, after)
	}
	sandboxPod = sandboxPod.DeepCopy()
	sandboxPod.Name, sandboxPod.ResourceVersion = "after-forgeries", ""
	if err := c.Create(ctx, sandboxPod, client.DryRunAll); err != nil {
		t.Errorf("a compliant sandbox Pod in %s after the forged reviews: %v", governed, err)
	}
}
