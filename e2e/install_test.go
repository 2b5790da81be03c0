package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testinstall"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// The components as an admin installs them — images published under a
// versioned tag, manifests/default and manifests/scheduler applied with
// kubectl apply -k, each running as Pods with the shipped ServiceAccounts
// and RBAC — do on the real node what their tests check in process: the
// webhook (two replicas) puts the sample policy in force and applies it,
// the agent runs the node tests' checks (it publishes the node's images,
// pulls PrepullJobs, removes what it pulled across a restart, shows a pull
// in progress), and asrl-scheduler places a warm pool by the node's cache.
// kubectl delete -k then leaves nothing the manifests made. On an existing
// cluster (e2e/kind) the components are installed already; the node tests
// drive them there, and this test checks the webhook and the RBAC.
func TestInstalledAsShipped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bin, "kubectl")
	admin := kubeClient(t)
	c := clusterClient(t)
	// On an existing cluster the components are installed already (e2e/kind
	// installs them as this test does), and stay.
	installOnTheRealNode(t, ctx, kubectl)
	// A node the agent runs on.
	var node string
	if local != nil {
		node = local.RealNodeName()
	} else {
		node = publishedNode(t)
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
		if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig(), "apply", "-f", "../examples/sandboxpolicy.yaml").CombinedOutput(); err != nil {
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
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sandbox", Labels: map[string]string{policy.SandboxPodLabel: "sandbox"}},
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
		if local != nil {
			pod.Spec.Containers[0].SecurityContext = nil
			t.Run("only the API server calls it", func(t *testing.T) { onlyTheAPIServerCallsTheInstalledWebhook(t, ctx, c, ns, pod) })
			t.Run("it fences the sandboxes off the network", func(t *testing.T) { sandboxesAreFenced(t, ctx, c, ns) })
		}
	})

	// On an existing cluster the node tests drive the installed agent and
	// scheduler; on the local one they run their own, and drive the
	// installed ones here.
	if local != nil {
		n := installedNode(t, node, local.RegistryAddr())
		t.Run("the agent", func(t *testing.T) {
			n.agent.Start(t, ctx)
			t.Run("publishes the node's images", func(t *testing.T) { agentPublishesTheNodesImages(t, ctx, n) })
			t.Run("measures the filesystem containerd keeps images on", func(t *testing.T) { measuresTheImageFilesystem(t, ctx, n) })
			t.Run("pulls PrepullJobs", func(t *testing.T) { prepullJobs(t, ctx, n) })
			t.Run("removes what it pulled across a restart", func(t *testing.T) { prepullAcrossAgentRestart(t, ctx, n) })
			t.Run("shows a pull in progress", func(t *testing.T) { pullInProgress(t, ctx, n) })
		})
		t.Run("asrl-scheduler places a warm pool by the node's cache", func(t *testing.T) {
			addEmptierNodes(t, ctx)
			poolLandsWherePrepulled(t, ctx, n, "e2e-installed-placement")
		})
	}

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
}

// installOnTheRealNode installs the components in the local cluster for
// the test, and uninstalls them when it ends, failing it if anything the
// manifests made is left; on an existing cluster, where they are
// installed already, it does nothing.
func installOnTheRealNode(t *testing.T, ctx context.Context, kubectl string) {
	t.Helper()
	if local == nil {
		return
	}
	in, err := testinstall.OnRealNode(ctx, local, kubectl, t.TempDir(), "")
	t.Cleanup(func() {
		if in != nil {
			if err := in.Uninstall(context.Background()); err != nil {
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
}

// measuresTheImageFilesystem: the shipped DaemonSet shows the agent
// containerd's root at its own path, where the runtime says its images
// are, so the disk budget has figures, and they are that filesystem's.
func measuresTheImageFilesystem(t *testing.T, ctx context.Context, n *sandboxNode) {
	var st unix.Statfs_t
	if err := unix.Statfs(local.ContainerdRoot(), &st); err != nil {
		t.Fatal(err)
	}
	want := int64(st.Blocks) * st.Bsize
	var fs v1alpha1.ImageFilesystem
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		fs, err = n.images.Filesystem(ctx)
		return err == nil && fs.CapacityBytes > 0, nil
	})
	if err != nil || fs.CapacityBytes != want {
		t.Errorf("the installed agent publishes an image filesystem of %d bytes (%v), want containerd's root's, %d", fs.CapacityBytes, err, want)
	}
}
