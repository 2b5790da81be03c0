package webhook_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// mirrored reports whether a sandbox Pod created (dry run) in ns now
// comes back from the mirror at host.
func (w *webhookTest) mirrored(t *testing.T, ns, host string) bool {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: "probe"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
	if err := w.c.Create(context.Background(), pod, client.DryRunAll); err != nil {
		t.Fatalf("creating a sandbox Pod in %s: %v", ns, err)
	}
	return strings.HasPrefix(pod.Spec.Containers[0].Image, host+"/")
}

// mirrorPolicy rewrites docker.io to host in the namespaces labelled
// key=value.
func mirrorPolicy(name, key, value, host string) *v1alpha1.SandboxPolicy {
	return &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: value}},
		Images:            &v1alpha1.ImagePolicy{Rewrite: []v1alpha1.ImageRewrite{{From: "docker.io", To: host + "/hub"}}},
	}}
}

// inForce waits until p's status says it is in force at its generation.
func (w *webhookTest) inForce(t *testing.T, p *v1alpha1.SandboxPolicy) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha1.SandboxPolicy{}
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return false, err
		}
		cond := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.PolicyInForce)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == got.Generation, nil
	})
	if err != nil {
		t.Errorf("SandboxPolicy %s does not say it is in force: %v", p.Name, err)
	}
}

func (w *webhookTest) namespaceLabelledIntoAPolicy(t *testing.T) {
	ctx := context.Background()
	ns, s, c := w.ns, w.s, w.c
	other := cluster.NewNamespace(t)
	if err := s.Serve(ctx, other); err != nil {
		t.Fatal(err)
	}
	pol := mirrorPolicy("relabel-"+ns, "relabel-test", ns, "relabel.example.com")
	if err := c.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pol) })
	w.inForce(t, pol)
	if w.mirrored(t, other, "relabel.example.com") {
		t.Fatal("a namespace the policy does not select follows it")
	}
	// The API server matches the policy's entry against the
	// namespace's labels as its own cache has them: the entries need
	// no rewrite for it.
	policies := &admissionregistrationv1.MutatingWebhookConfiguration{}
	key := types.NamespacedName{Name: "asrl-webhook-" + ns + webhook.PoliciesSuffix}
	if err := c.Get(ctx, key, policies); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"relabel-test":%q}}}`, ns)))
	if err := c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, patch); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		return w.mirrored(t, other, "relabel.example.com"), nil
	})
	if err != nil {
		t.Errorf("sandbox Pods in a namespace labelled into the policy do not follow it: %v", err)
	}
	after := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, key, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != policies.ResourceVersion {
		t.Errorf("the policies' entries were rewritten for a relabelled namespace")
	}
}

func (w *webhookTest) policyInForceOnceWritten(t *testing.T) {
	ctx := context.Background()
	ns, s, c := w.ns, w.s, w.c
	other := cluster.NewNamespace(t)
	if err := s.Serve(ctx, other); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"new-policy-test":%q}}}`, ns)))
	if err := c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, patch); err != nil {
		t.Fatal(err)
	}
	pol := mirrorPolicy("new-"+ns, "new-policy-test", ns, "first.example.com")
	if err := c.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pol) })
	if !w.mirrored(t, other, "first.example.com") {
		t.Error("a sandbox Pod created right after the policy does not follow it")
	}
	// The elected replica writes the policy's status meanwhile.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pol), pol); err != nil {
			return err
		}
		pol.Spec.Images.Rewrite[0].To = "second.example.com/hub"
		return c.Update(ctx, pol)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !w.mirrored(t, other, "second.example.com") {
		t.Error("a sandbox Pod created right after the policy's change does not follow the change")
	}
	w.inForce(t, pol)
	if err := s.WaitForPolicySet(ctx, other, true); err != nil {
		t.Error(err)
	}
	// The shipped configurations are left as shipped, but for their
	// CA: re-applying them has nothing to undo.
	for _, name := range []string{"sandbox-pods.sandbox-fleet.io", "sandbox-templates.sandbox-fleet.io"} {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Name: "asrl-webhook-" + ns}, m); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(m.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool { return w.Name == name })
		if i < 0 || !webhook.IsTemplate(m.Webhooks[i].NamespaceSelector) || hasCallCondition(m.Webhooks[i]) {
			t.Errorf("the shipped entry %s was changed: %+v", name, m.Webhooks)
		}
	}
}

func (w *webhookTest) webhookDown(t *testing.T) {
	ctx := context.Background()
	ns, s, c, pol := w.ns, w.s, w.c, w.pol
	mutated := sandboxTemplate(ns, "while-down", nil)
	if err := c.Create(ctx, mutated); err != nil {
		t.Fatal(err)
	}
	// The policies of the tests before, which might have shared a
	// namespace with pol, are gone: its Pod entry skips compliant Pods
	// again.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Name: "asrl-webhook-" + ns + webhook.PoliciesSuffix}, m); err != nil {
			return false, err
		}
		conditioned := 0
		for _, w := range m.Webhooks {
			if pod, _ := webhook.IsPodEntry(w.Name); pod && hasCallCondition(w) {
				conditioned++
			}
		}
		return conditioned == 1, nil
	})
	if err != nil {
		t.Fatalf("the policy's sandbox Pod entry has no condition: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain-while-down", Namespace: ns, Labels: besideSandboxes},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
	if err := c.Create(ctx, plain); err != nil {
		t.Errorf("a Pod the policy's otherPodSelector selects was refused with the webhook down: %v", err)
	}
	unselected := plain.DeepCopy()
	unselected.ResourceVersion = ""
	unselected.Name, unselected.Labels = "unselected-while-down", nil
	if err := c.Create(ctx, unselected); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("a Pod neither a sandbox nor selected, with the webhook down: %v, want refused", err)
	}
	sandbox := plain.DeepCopy()
	sandbox.ResourceVersion = ""
	sandbox.Name, sandbox.Labels = "sandbox-while-down", map[string]string{policy.SandboxPodLabel: "x"}
	if err := c.Create(ctx, sandbox); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("a sandbox Pod with the webhook down (failurePolicy Fail): %v, want refused", err)
	}
	// A Pod that already complies is judged by the API server alone.
	if err := c.Create(ctx, fromTemplate(mutated, "compliant-while-down")); err != nil {
		t.Errorf("a compliant sandbox Pod with the webhook down: %v, want created", err)
	}
	// No policy changes while none can put it in force.
	changed := &v1alpha1.SandboxPolicy{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pol), changed); err != nil {
		t.Fatal(err)
	}
	changed.Spec.RuntimeClassName = "other-" + ns
	if err := c.Update(ctx, changed); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("changing a policy with the webhook down: %v, want refused", err)
	}
}
