package testcluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// After Stop no component is running, no port is listening and no file is
// left; the same holds for a detached cluster stopped by StopDetached from
// its state file alone.
func TestStopLeavesNothing(t *testing.T) {
	for _, detached := range []bool{false, true} {
		name := "attached"
		opts := []Option{WithNodes(FakeNodes("n", 1, DefaultCapacity(), nil)...)}
		if detached {
			name = "detached"
			opts = append(opts, Detached(), WithDir(filepath.Join(t.TempDir(), "cluster")))
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := Start(ctx, opts...)
			if err != nil {
				t.Fatal(err)
			}
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					_ = c.Stop(false)
				}
			})
			nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil || len(nodes.Items) != 1 {
				t.Fatalf("nodes: %v, err %v", nodes, err)
			}
			pids := map[string]int{}
			for _, p := range c.procs {
				pids[p.name] = p.cmd.Process.Pid
			}
			if len(pids) != 6 {
				t.Fatalf("started %v, want etcd, apiserver, controller-manager, scheduler, kwok and the Agent Sandbox controller", pids)
			}
			apiAddr := strings.TrimPrefix(c.config.Host, "https://")

			if detached {
				if !Running(c.Dir()) {
					t.Fatal("Running reports a live detached cluster as stopped")
				}
				err = StopDetached(c.Dir())
				// The components are this test's children: wait until they
				// are reaped so their PIDs are truly gone.
				for _, p := range c.procs {
					<-p.done
				}
			} else {
				err = c.Stop(false)
			}
			stopped = true
			if err != nil {
				t.Fatal(err)
			}
			for name, pid := range pids {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("%s (pid %d) still exists after stop: %v", name, pid, err)
				}
			}
			if conn, err := net.DialTimeout("tcp", apiAddr, time.Second); err == nil {
				conn.Close()
				t.Errorf("the apiserver's port %s still accepts connections", apiAddr)
			}
			if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
				t.Errorf("run directory %s is still there: %v", c.Dir(), err)
			}
		})
	}
}
