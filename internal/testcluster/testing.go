package testcluster

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Main starts one cluster for a test package, stores it in *cluster, runs
// the package's tests and exits. Use it from TestMain:
//
//	var cluster *testcluster.Cluster
//
//	func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }
//
// When a test fails the component logs are kept and their directory printed;
// on success nothing is left behind.
func Main(m *testing.M, cluster **Cluster, opts ...Option) {
	// As the commands do: controller-runtime's caches log to klog.
	ctrllog.SetLogger(klog.NewKlogr())
	c, err := Start(context.Background(), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*cluster = c

	// An interrupted `go test` would otherwise kill the components through
	// Pdeathsig but leave the run directory.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		_ = c.Stop(true)
		fmt.Fprintf(os.Stderr, "interrupted; test cluster logs are in %s\n", c.LogDir())
		os.Exit(1)
	}()

	code := m.Run()
	signal.Stop(signals)
	failed := code != 0
	if err := c.Stop(failed); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the test cluster: %v\n", err)
		code = 1
	}
	if failed {
		fmt.Fprintf(os.Stderr, "test cluster logs are in %s\n", c.LogDir())
	}
	os.Exit(code)
}

// NewNamespace creates a namespace of the test's own, ready for pods (its
// default service account exists), and deletes it when the test ends. A
// failing test names the component logs.
func (c *Cluster) NewNamespace(t testing.TB) string {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("test cluster component logs: %s", c.LogDir())
		}
	})
	return NewNamespace(t, c.kube)
}

// NewNamespace creates a namespace for the test in any cluster, ready for
// pods, and deletes it when the test ends.
func NewNamespace(t testing.TB, kube kubernetes.Interface) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, err := CreateNamespace(ctx, kube, "test-")
	if name != "" {
		t.Cleanup(func() {
			err := kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
			if err != nil {
				t.Errorf("deleting namespace %s: %v", name, err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// CreateNamespace creates a namespace named from prefix and waits until
// it is ready for pods: its default service account exists, without which
// Pods are refused. The name is returned, once made, also with an error.
func CreateNamespace(ctx context.Context, kube kubernetes.Interface, prefix string) (string, error) {
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a namespace: %w", err)
	}
	return ns.Name, poll(ctx, "the default service account of namespace "+ns.Name, func(ctx context.Context) error {
		_, err := kube.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}
