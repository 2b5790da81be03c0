// Package e2e is the end-to-end suite. It runs against any cluster: with
// SANDBOX_FLEET_E2E_KUBECONFIG set it uses that cluster (e2e/kind sets one up
// on kind), otherwise it starts the local test cluster with a real node —
// containerd, runc and a kubelet on this machine, pulling the test images
// from a registry on loopback.
package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/claim"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// KubeconfigEnv names the kubeconfig of an existing cluster to test.
const KubeconfigEnv = "SANDBOX_FLEET_E2E_KUBECONFIG"

var (
	// local is the cluster this suite started, nil when testing an existing one.
	local    *testcluster.Cluster
	existing *rest.Config
)

func TestMain(m *testing.M) {
	if path := os.Getenv(KubeconfigEnv); path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			panic(err)
		}
		existing = cfg
		os.Exit(m.Run())
	}
	testcluster.Main(m, &local, testcluster.WithRealNode(), testcluster.WithNetworkPolicies(), testcluster.WithNodes())
}

func restConfig() *rest.Config {
	if local != nil {
		return local.RESTConfig()
	}
	return rest.CopyConfig(existing)
}

func kubeClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	kc, err := kubernetes.NewForConfig(restConfig())
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// newNamespace creates a namespace for the test, deleted when it ends.
func newNamespace(t *testing.T) string {
	if local != nil {
		return local.NewNamespace(t)
	}
	return testcluster.NewNamespace(t, kubeClient(t))
}

// startRun gives a test a namespace of its own, clients working in it and a
// tracker of run runID there.
func startRun(t *testing.T, ctx context.Context, runID string) (*kube.Clients, *tracker.Tracker) {
	t.Helper()
	clients, err := kube.ForConfig(restConfig(), newNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, clients.Namespace, runID)
	if err != nil {
		t.Fatal(err)
	}
	return clients, tr
}

// createPool creates, for run runID, a template of image and a warm pool
// of replicas of it, and returns the pool without waiting for it.
func createPool(t *testing.T, ctx context.Context, clients *kube.Clients, runID, image string, spec resources.PodSpec, replicas int32) *extensionsv1beta1.SandboxWarmPool {
	t.Helper()
	tmpl, err := resources.Template(clients.Namespace, runID, image, spec)
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.WarmPool(tmpl, replicas)
	for _, obj := range []client.Object{tmpl, pool} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

// claimer claims the run's sandboxes, giving up on one only after a
// minute of backoff or of being unschedulable.
func claimer(clients *kube.Clients, tr *tracker.Tracker) *claim.Claimer {
	return &claim.Claimer{Client: clients.Client, Tracker: tr, Grace: claim.Grace{Backoff: time.Minute, Unschedulable: time.Minute}}
}

// requireLocal skips a test that needs what only the local cluster has,
// saying what.
func requireLocal(t *testing.T, needs string) {
	t.Helper()
	if local == nil {
		t.Skip("runs on the local cluster only: it " + needs)
	}
}
