package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// TestAChangeNeverStoredLeavesNoEntry: a SandboxPolicy creation the
// webhook admits but the API server never stores (a later admission step
// refused it) is pending for a moment — its namespace's sandbox Pods are
// refused while the change may still be stored — and then, once a read of
// the API server finds no such policy, its entry is gone and the Pods are
// admitted, without waiting for the elected replica's periodic sync.
func TestAChangeNeverStoredLeavesNoEntry(t *testing.T) {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	s, clients := startWebhook(t, ns)
	c := clients.Client

	// The review the API server sends for a creation, which it then does
	// not store.
	name := "never-stored-" + ns
	review, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": "r1", "operation": "CREATE", "name": name,
			"kind":     map[string]string{"group": "sandbox-fleet.io", "version": "v1alpha1", "kind": "SandboxPolicy"},
			"resource": map[string]string{"group": "sandbox-fleet.io", "version": "v1alpha1", "resource": "sandboxpolicies"},
			"object": map[string]any{"apiVersion": "sandbox-fleet.io/v1alpha1", "kind": "SandboxPolicy",
				"metadata": map[string]any{"name": name, "uid": "uid-" + name, "generation": 1},
				"spec":     map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]string{corev1.LabelMetadataName: ns}}}},
		},
	})
	admitted := time.Now()
	resp, err := s.AsAPIServer().Post(s.URL+"/validate-sandbox-policies", "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	var answer bytes.Buffer
	_, _ = answer.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(answer.String(), `"allowed":true`) {
		t.Fatalf("the creation was not admitted: %d %s", resp.StatusCode, answer.String())
	}

	entries := func() (pending []webhook.Pending, podEntries int) {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Name: "asrl-webhook-" + ns + webhook.PoliciesSuffix}, cfg); err != nil {
			t.Fatal(err)
		}
		pending, err := webhook.ReadPending(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range cfg.Webhooks {
			if pod, p := webhook.IsPodEntry(w.Name); pod && p {
				podEntries++
			}
		}
		return pending, podEntries
	}
	if pending, n := entries(); len(pending) != 1 || pending[0].Name != name || n != 1 {
		t.Fatalf("after the admission: pending %+v, %d pending Pod entries; want the change and its entry", pending, n)
	}

	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "registry.example.com/task:1"}}}}
	}
	// The change may still be stored: the API server stores an object
	// moments after its validating webhooks allow it.
	err = c.Create(ctx, pod("while-pending"))
	if err == nil || !strings.Contains(err.Error(), "retry") {
		t.Errorf("a sandbox Pod while the change may still be stored: %v, want a refusal saying retry", err)
	}

	var gone time.Duration
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 45*time.Second, true, func(context.Context) (bool, error) {
		pending, n := entries()
		gone = time.Since(admitted)
		return len(pending) == 0 && n == 0, nil
	})
	if err != nil {
		t.Fatalf("the change never stored is still pending %s after its admission", gone)
	}
	// The periodic sync runs each minute; the change went on the look-up
	// scheduled storageLag (10 s) after the sync that saw it pending.
	if gone > 30*time.Second {
		t.Errorf("the change never stored was dropped %s after its admission, want within moments of 10 s", gone)
	}
	if err := c.Create(ctx, pod("after")); err != nil {
		t.Errorf("a sandbox Pod once the change was dropped: %v", err)
	}
}
