package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/componentimage"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testinstall"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
)

// The components as an admin installs them — images published under a
// versioned tag, manifests/default and manifests/scheduler applied with
// kubectl apply -k, each running as Pods with the shipped ServiceAccounts
// and RBAC — do on the real node what their tests check in process: the
// webhook (two replicas) puts the sample policy in force and applies it,
// the agent publishes the node's images and pulls a PrepullJob, and
// asrl-scheduler places a warm pool by the node's cache. kubectl delete -k
// then leaves nothing the manifests made.
func TestInstalledAsShipped(t *testing.T) {
	requireLocal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bin, "kubectl")
	admin := kubeClient(t)
	clients, err := local.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	c := clients.Client
	node := local.RealNodeName()

	// The admin marks the nodes sandboxes run on: the agent runs there.
	label := func(value string) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"sandbox-fleet.io/sandbox-node":%s}}}`, value)
		return c.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	if err := label(`"true"`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := label("null"); err != nil {
			t.Error(err)
		}
	})

	// The node's runtime and the agent's state are where this cluster
	// keeps them, not at the usual host paths.
	agentPatch := fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: asrl-prepull-agent}
spec:
  template:
    spec:
      volumes:
      - name: runtime-socket
        hostPath: {path: %q, type: Socket}
      - name: agent-dir
        hostPath: {path: %q, type: DirectoryOrCreate}
`, local.CRISocket(), t.TempDir())
	installation, err := testinstall.Install(ctx, testinstall.Options{
		Kubectl: kubectl, Kubeconfig: local.Kubeconfig(),
		Registry: local.RegistryAddr() + "/sandbox-fleet", Version: "v0.0.0-e2e." + strconv.FormatInt(time.Now().Unix(), 10),
		Publish:           componentimage.Push,
		AllowedRegistries: "docker.io/sandbox-fleet",
		Patches:           []testinstall.Patch{{Kind: "DaemonSet", Name: "asrl-prepull-agent", Patch: agentPatch}},
		Dir:               t.TempDir(),
	})
	uninstalled := false
	t.Cleanup(func() {
		if installation != nil && !uninstalled {
			if err := installation.Uninstall(context.Background()); err != nil {
				t.Error(err)
			}
		}
		// The suite's other tests need the CRDs the uninstall deleted.
		if err := local.InstallCRDs(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the webhook puts the sample policy in force and applies it", func(t *testing.T) {
		deployment, err := admin.AppsV1().Deployments("sandbox-fleet-system").Get(ctx, "asrl-webhook", metav1.GetOptions{})
		if err != nil || deployment.Status.ReadyReplicas != 2 {
			t.Fatalf("the webhook's Deployment: %v ready (%v), want 2", deployment.Status.ReadyReplicas, err)
		}
		pods, err := admin.CoreV1().Pods("sandbox-fleet-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=asrl-webhook"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.Priority == nil || *p.Spec.Priority != 100000000 {
				t.Errorf("webhook Pod %s has priority %v, want the asrl-webhook PriorityClass's", p.Name, p.Spec.Priority)
			}
		}
		if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", local.Kubeconfig(), "apply", "-f", "../examples/sandboxpolicy.yaml").CombinedOutput(); err != nil {
			t.Fatalf("applying the sample policy: %v\n%s", err, out)
		}
		baseline := &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "baseline"}}
		t.Cleanup(func() { _ = c.Delete(context.Background(), baseline) })
		ns := newNamespace(t)
		patch := []byte(`{"metadata":{"labels":{"sandbox-fleet.io/sandbox-policy":"baseline"}}}`)
		if err := c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(baseline), baseline); err != nil {
				return false, err
			}
			cond := apimeta.FindStatusCondition(baseline.Status.Conditions, v1alpha1.PolicyInForce)
			return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == baseline.Generation, nil
		})
		if err != nil {
			t.Fatalf("the sample policy does not say it is in force: %v", err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sandbox", Labels: map[string]string{webhook.SandboxPodLabel: "sandbox"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "docker.io/library/busybox:1.36"}}}}
		if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		sc := pod.Spec.Containers[0].SecurityContext
		if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken || sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("a sandbox Pod in the labelled namespace lacks the policy's security defaults: %+v", pod.Spec)
		}
		pod.Name, pod.ResourceVersion = "privileged", ""
		pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
		if err := c.Create(ctx, pod, client.DryRunAll); err == nil || !strings.Contains(err.Error(), `denied by SandboxPolicy "baseline"`) {
			t.Errorf("a privileged sandbox Pod: %v, want it denied by the policy", err)
		}
	})

	t.Run("the agent publishes the node and pulls a PrepullJob", func(t *testing.T) {
		ns := newNamespace(t)
		nsClients, err := local.Clients(ns)
		if err != nil {
			t.Fatal(err)
		}
		waitForCache(t, ctx, nsClients, node, func(c *v1alpha1.NodeImageCache) bool { return c.ImageCount > 0 && c.AgentVersion != "" })
		img, _ := pushNewImage(t, ctx, "installed-agent")
		job := newJob(ns, "installed", []string{img}, map[string]string{corev1.LabelHostname: node})
		job.Spec.DiskHighWaterPercent = 85
		if err := c.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		if e := waitForEntry(t, ctx, nsClients, job, node, func(e v1alpha1.NodePrepullStatus) bool { return e.Phase != v1alpha1.PrepullPulling }); e.Phase != v1alpha1.PrepullSucceeded {
			t.Fatalf("the installed agent did not pull %s: %+v", img, e)
		}
		outside := newJob(ns, "outside", []string{"ghcr.io/private/model:1"}, nil)
		if err := c.Create(ctx, outside); err == nil || !strings.Contains(err.Error(), "is from none of the registries asrl-prepull-agent may pull from") {
			t.Errorf("a job outside the allowed registries: %v, want it refused when made", err)
		}
	})

	t.Run("asrl-scheduler places a warm pool by the node's cache", func(t *testing.T) {
		addEmptierNodes(t, ctx)
		const runID = "e2e-installed-placement"
		runClients, tr := startRun(t, ctx, runID)
		poolLandsWherePrepulled(t, ctx, runClients, tr, runID)
	})

	t.Run("each component may do only what it must", func(t *testing.T) {
		for _, tt := range []struct {
			account, namespace string
			attrs              authorizationv1.ResourceAttributes
			want               bool
		}{
			{"asrl-webhook", "sandbox-fleet-system", authorizationv1.ResourceAttributes{Namespace: "sandbox-fleet-system", Verb: "get", Resource: "secrets", Name: "asrl-webhook-cert"}, true},
			{"asrl-webhook", "sandbox-fleet-system", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "secrets", Name: "another"}, false},
			{"asrl-webhook", "sandbox-fleet-system", authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "list", Resource: "secrets"}, false},
			{"asrl-webhook", "sandbox-fleet-system", authorizationv1.ResourceAttributes{Namespace: "sandbox-fleet-system", Verb: "update", Resource: "secrets", Name: "another"}, false},
			{"asrl-webhook", "sandbox-fleet-system", authorizationv1.ResourceAttributes{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: "another"}, false},
			{"asrl-webhook", "sandbox-fleet-system", authorizationv1.ResourceAttributes{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, false},
			{"asrl-webhook", "sandbox-fleet-system", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Resource: "pods"}, false},
			{"asrl-prepull-agent", "sandbox-fleet-agent", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "secrets"}, false},
			{"asrl-prepull-agent", "sandbox-fleet-agent", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Group: "sandbox-fleet.io", Resource: "prepulljobs"}, false},
			{"asrl-prepull-agent", "sandbox-fleet-agent", authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes", Name: node}, false},
			{"asrl-scheduler", "kube-system", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "secrets"}, false},
			{"asrl-scheduler", "kube-system", authorizationv1.ResourceAttributes{Verb: "update", Group: "sandbox-fleet.io", Resource: "nodeimagecaches", Name: node}, false},
		} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:" + tt.namespace + ":" + tt.account,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + tt.namespace},
				ResourceAttributes: &tt.attrs,
			}}
			if err := c.Create(ctx, sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != tt.want {
				t.Errorf("%s may %s %s %s/%s: %v, want %v", tt.account, tt.attrs.Verb, tt.attrs.Resource, tt.attrs.Namespace, tt.attrs.Name, sar.Status.Allowed, tt.want)
			}
		}
	})

	if err := installation.Uninstall(ctx); err != nil {
		t.Error(err)
	}
	uninstalled = true
}
