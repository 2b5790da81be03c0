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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
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

// openFleet opens a fleet of run runID over ts in a namespace of the
// test's own, as a Go program using pkg/fleet does, with sandboxes small
// enough for the node and the default configuration changed by tweak; the
// fleet's objects are torn down when the test ends.
func openFleet(t *testing.T, ctx context.Context, runID string, ts []tasks.Task, tweak func(*config.Fleet)) (*kube.Clients, *fleet.Fleet) {
	t.Helper()
	clients, err := kube.ForConfig(restConfig(), newNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Template.Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	if tweak != nil {
		tweak(&cfg)
	}
	f, err := fleet.Open(ctx, runID, cfg, ts, []fleet.Target{{Config: config.Cluster{Name: "e2e", Weight: 1}, Clients: clients}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer f.Close()
		if err := f.Teardown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return clients, f
}

// replicas is a warm pool size for Fleet.Warm: n of every image.
func replicas(n int) func(string) int { return func(string) int { return n } }

// requireLocal skips a test that needs what only the local cluster has,
// saying what.
func requireLocal(t *testing.T, needs string) {
	t.Helper()
	if local == nil {
		t.Skip("runs on the local cluster only: it " + needs)
	}
}
