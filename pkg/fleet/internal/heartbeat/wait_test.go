package heartbeat_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/heartbeat"
)

var cluster *testcluster.Cluster

// The API server alone: heartbeats are Leases.
func TestMain(m *testing.M) {
	testcluster.Main(m, &cluster, testcluster.WithoutAgentSandbox(), testcluster.WithNodes())
}

// A run taken over waits while its driver renews its heartbeat, and goes
// on once the driver lets it go; a driver that is a dead process of this
// host is not waited for.
func TestWaitAbandoned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, err := cluster.Clients(cluster.NewNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	wait := func(run string) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- heartbeat.WaitAbandoned(klog.NewContext(ctx, ktesting.NewLogger(t, ktesting.NewConfig())), clients.Kube, clients.Namespace, run)
		}()
		return done
	}

	live, err := heartbeat.Start(ctx, clients.Kube, clients.Namespace, "live", "serve@another-host/1", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done := wait("live")
	select {
	case err := <-done:
		t.Fatalf("WaitAbandoned returned %v while the driver renews", err)
	case <-time.After(5 * time.Second):
	}
	if err := live.Let(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitAbandoned still waits after the driver let the run go")
	}

	host, _ := os.Hostname()
	dead := fmt.Sprintf("serve@%s/%d", host, 1<<22+1) // above pid_max: no such process
	gone, err := heartbeat.Start(ctx, clients.Kube, clients.Namespace, "dead", dead, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Stop(context.Background())
	select {
	case err := <-wait("dead"):
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitAbandoned waited for a process of this host that does not exist")
	}
	if err := clients.Kube.CoordinationV1().Leases(clients.Namespace).Delete(ctx, heartbeat.Name("live"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
