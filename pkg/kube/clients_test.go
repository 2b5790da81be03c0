package kube_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// Every client built from one Clients shares its rate limits, and the
// Throttle counts the requests those limits held back: none at the
// defaults, nearly all past the burst at 2 requests a second.
func TestThrottleCountsDelays(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		limits  kube.Limits
		delayed bool
	}{{kube.Limits{}, false}, {kube.Limits{QPS: 4, Burst: 1}, true}} {
		c, err := kube.ForTarget(kube.Target{Kubeconfig: cluster.Kubeconfig(), Limits: tt.limits})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := c.Client.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{}); err != nil {
				t.Fatal(err)
			}
		}
		d := c.Throttle.Delayed()
		if tt.delayed && (d.Requests < 4 || d.Total < time.Second || d.Max < 100*time.Millisecond) {
			t.Errorf("limits %+v: 6 requests through two clients delayed %+v; want at least 4 held back, 1s in all", tt.limits, d)
		}
		if !tt.delayed && d.Requests != 0 {
			t.Errorf("default limits delayed %+v, want nothing", d)
		}
	}
}

// Requests counts every request of every client built from one Clients:
// each typed Get is one, and the controller-runtime client's (with its
// discovery) are counted on the same counter.
func TestRequestsCounted(t *testing.T) {
	ctx := context.Background()
	c, err := kube.ForTarget(kube.Target{Kubeconfig: cluster.Kubeconfig()})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Requests.Count(); n != 3 {
		t.Errorf("3 typed Gets counted %d requests, want 3", n)
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{}); err != nil {
		t.Fatal(err)
	}
	if n := c.Requests.Count(); n < 4 {
		t.Errorf("a controller-runtime Get after 3 typed ones counted %d requests in all, want at least 4", n)
	}
}
