package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// TestNetworkFences: the webhook as shipped, with its own RBAC, writes a
// policy's NetworkPolicy into the namespace it governs and keeps it as
// the policy calls for it — put back when changed, unlabelled or deleted,
// gone when the policy stops fencing —, has the namespace's templates
// leave networking to it, refuses a policy whose egress is the metadata
// endpoint, and denies the sandbox Pods of a namespace where it cannot
// write the fence. That the fence holds on a real node is e2e's
// (TestInstalledAsShipped); the API server alone enforces nothing.
func TestNetworkFences(t *testing.T) {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	s, clients := startWebhook(t, ns)
	c := clients.Client
	pol := &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fences-" + ns}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fences": ns}},
		Network: &v1alpha1.NetworkIsolation{Egress: []networkingv1.NetworkPolicyEgressRule{{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}}}},
		}}},
	}}
	label(t, c, ns, "fences", ns)
	if err := c.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pol) })
	if err := s.WaitForPolicySet(ctx, ns, true); err != nil {
		t.Fatal(err)
	}
	want := policy.NetworkPolicy(*pol, ns)
	fence := func(what string, ok func(*networkingv1.NetworkPolicy, error) bool) {
		t.Helper()
		var np *networkingv1.NetworkPolicy
		var err error
		if waitErr := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			np = &networkingv1.NetworkPolicy{}
			err = c.Get(ctx, client.ObjectKeyFromObject(want), np)
			return ok(np, err), nil
		}); waitErr != nil {
			t.Fatalf("%s: NetworkPolicy %s is %+v (%v)", what, want.Name, np, err)
		}
	}
	asCalledFor := func(np *networkingv1.NetworkPolicy, err error) bool {
		return err == nil && np.Labels[policy.NetworkIsolationLabel] == "true" && equality.Semantic.DeepEqual(np.Spec, want.Spec) &&
			len(np.OwnerReferences) == 1 && np.OwnerReferences[0].UID == pol.UID
	}
	fence("written", asCalledFor)
	if len(want.Spec.Egress) != 2 || !strings.Contains(strings.Join(want.Spec.Egress[1].To[0].IPBlock.Except, " "), "169.254.169.254/32") {
		t.Errorf("the fence's egress %+v: want DNS, then the internet without the metadata endpoint", want.Spec.Egress)
	}
	sandbox := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sandbox", Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: "sandbox"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
	if err := c.Create(ctx, sandbox.DeepCopy(), client.DryRunAll); err != nil {
		t.Errorf("a sandbox Pod behind its fence: %v", err)
	}

	t.Run("changed, unlabelled or deleted, it is put back", func(t *testing.T) {
		np := &networkingv1.NetworkPolicy{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), np); err != nil {
			t.Fatal(err)
		}
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{})
		if err := c.Update(ctx, np); err != nil {
			t.Fatal(err)
		}
		fence("opened to everything", asCalledFor)
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), np); err != nil {
			t.Fatal(err)
		}
		delete(np.Labels, policy.NetworkIsolationLabel)
		if err := c.Update(ctx, np); err != nil {
			t.Fatal(err)
		}
		fence("unlabelled", asCalledFor)
		if err := c.Delete(ctx, np); err != nil {
			t.Fatal(err)
		}
		fence("deleted", asCalledFor)
	})

	t.Run("templates leave networking to the fence", func(t *testing.T) {
		tmpl := sandboxTemplate(ns, "managed", nil)
		tmpl.Spec.NetworkPolicyManagement = extensionsv1beta1.NetworkPolicyManagementManaged
		if err := c.Create(ctx, tmpl, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if tmpl.Spec.NetworkPolicyManagement != extensionsv1beta1.NetworkPolicyManagementUnmanaged {
			t.Errorf("a template under the fence has networkPolicyManagement %q, want Unmanaged", tmpl.Spec.NetworkPolicyManagement)
		}
	})

	t.Run("a policy reaching the metadata endpoint is refused", func(t *testing.T) {
		bad := pol.DeepCopy()
		bad.ObjectMeta = metav1.ObjectMeta{Name: "metadata-" + ns}
		bad.Spec.Network.Egress[0].To[0].IPBlock = &networkingv1.IPBlock{CIDR: "169.254.169.254/32"}
		err := c.Create(ctx, bad, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), `spec.network.egress[0].to[0].ipBlock: cidr "169.254.169.254/32" is the cloud metadata endpoint`) {
			t.Errorf("a policy allowing the metadata endpoint: %v, want refused naming the field", err)
		}
	})

	t.Run("a policy that stops fencing takes its fence down", func(t *testing.T) {
		network := pol.Spec.Network
		// The webhook writes the policy's status meanwhile: a conflict
		// is read again.
		setNetwork := func(n *v1alpha1.NetworkIsolation) {
			t.Helper()
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := c.Get(ctx, client.ObjectKeyFromObject(pol), pol); err != nil {
					return err
				}
				pol.Spec.Network = n
				return c.Update(ctx, pol)
			}); err != nil {
				t.Fatal(err)
			}
		}
		setNetwork(nil)
		fence("the policy unfenced", func(_ *networkingv1.NetworkPolicy, err error) bool { return apierrors.IsNotFound(err) })
		setNetwork(network)
		fence("the policy fencing again", asCalledFor)
	})

	t.Run("where the fence cannot be written no sandbox runs", func(t *testing.T) {
		// A quota of no NetworkPolicies, then the fence deleted: the
		// webhook cannot write it again.
		quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-network-policies", Namespace: ns},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/networkpolicies.networking.k8s.io": resource.MustParse("0")}}}
		if err := c.Create(ctx, quota); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, want.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		fence("deleted under the quota", func(_ *networkingv1.NetworkPolicy, err error) bool { return apierrors.IsNotFound(err) })
		err := c.Create(ctx, sandbox.DeepCopy(), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "namespace "+ns+" has no NetworkPolicy "+want.Name+" yet") {
			t.Errorf("a sandbox Pod where the fence cannot be written: %v, want refused saying so", err)
		}
		if err := c.Delete(ctx, quota); err != nil {
			t.Fatal(err)
		}
		fence("written once the quota went", asCalledFor)
		if err := c.Create(ctx, sandbox.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("a sandbox Pod behind its fence again: %v", err)
		}
	})
}

// label sets namespace ns's label key to value.
func label(t *testing.T, c client.Client, ns, key, value string) {
	t.Helper()
	namespace := &corev1.Namespace{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: ns}, namespace); err != nil {
		t.Fatal(err)
	}
	if namespace.Labels == nil {
		namespace.Labels = map[string]string{}
	}
	namespace.Labels[key] = value
	if err := c.Update(context.Background(), namespace); err != nil {
		t.Fatal(err)
	}
}
