package kube_test

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster, testcluster.WithNodes()) }

// A fleet's cluster is named by kubeconfig, context and namespace.
func TestForTarget(t *testing.T) {
	// A kubeconfig with a second context pointing at the same cluster in
	// another namespace.
	kc, err := clientcmd.LoadFromFile(cluster.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	other := *kc.Contexts[kc.CurrentContext]
	other.Namespace = "rl"
	kc.Contexts["other"] = &other
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		target kube.Target
		ns     string
	}{
		{kube.Target{Kubeconfig: path}, "default"},
		{kube.Target{Kubeconfig: path, Context: "other"}, "rl"},
		{kube.Target{Kubeconfig: path, Context: "other", Namespace: "eval"}, "eval"},
	} {
		c, err := kube.ForTarget(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if c.Namespace != tt.ns {
			t.Errorf("%+v: namespace %q, want %q", tt.target, c.Namespace, tt.ns)
		}
		if _, err := c.Kube.Discovery().ServerVersion(); err != nil {
			t.Errorf("%+v: %v", tt.target, err)
		}
	}
	if _, err := kube.ForTarget(kube.Target{Kubeconfig: path, Context: "missing"}); err == nil || !strings.Contains(err.Error(), `context "missing"`) {
		t.Errorf("missing context: %v", err)
	}
	if _, err := kube.ForTarget(kube.Target{InCluster: true}); err == nil || !strings.Contains(err.Error(), "in-cluster") {
		t.Errorf("in-cluster outside a Pod: %v", err)
	}
}
