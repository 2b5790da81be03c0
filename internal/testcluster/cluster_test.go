package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// A cluster RestartingExited starts a component that crashed again, and
// only once; one restarted on purpose is not started twice; and Stop
// stops every process it ever ran, with no restart behind its back.
func TestRestartingExited(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, WithNodes(FakeNodes("n", 1, DefaultCapacity(), nil)...), RestartingExited())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop(false)
		}
	})
	const name = "agent-sandbox-controller"
	crashed := c.Component(name)
	pids := []int{crashed.Pid()}
	if err := syscall.Kill(-crashed.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-crashed.Done()
	var started *Process
	for started == nil || started == crashed {
		select {
		case <-ctx.Done():
			t.Fatalf("%s was not started again after it crashed", name)
		case <-time.After(100 * time.Millisecond):
		}
		started = c.Component(name)
	}
	pids = append(pids, started.Pid())
	if log, err := os.ReadFile(crashed.logPath); err != nil || !strings.Contains(string(log), "started again as its Pod would be") {
		t.Errorf("the restart is not noted in %s (%v)", crashed.logPath, err)
	}

	if err := c.Restart(ctx, name); err != nil {
		t.Fatal(err)
	}
	restarted := c.Component(name)
	pids = append(pids, restarted.Pid())
	// Longer than the one-second look: a second start would be in place.
	time.Sleep(2500 * time.Millisecond)
	if now := c.Component(name); now != restarted {
		t.Errorf("%s restarted on purpose was started again (pid %d, then %d)", name, restarted.Pid(), now.Pid())
	}

	err = c.Stop(false)
	stopped = true
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists after stop: %v", name, pid, err)
		}
	}
	if now := c.Component(name); now != restarted {
		t.Errorf("%s was started again after Stop (pid %d)", name, now.Pid())
	}
}

// On a cluster WithPullDelays kwok leaves a Pod Pending until it carries
// ReadyAtAnnotation, then makes it Ready at the time that holds, not
// before.
func TestPullDelays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, WithoutAgentSandbox(), WithPullDelays(), WithNodes(FakeNodes("n", 1, DefaultCapacity(), nil)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(false); err != nil {
			t.Error(err)
		}
	})
	pods := c.kube.CoreV1().Pods(metav1.NamespaceDefault)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pulling"}, Spec: corev1.PodSpec{NodeName: "n-0",
		Containers: []corev1.Container{{Name: "c", Image: "registry.example/task:1"}}}}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func() bool {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}
	// kwok's stock stages make a Pod Ready within milliseconds.
	time.Sleep(2 * time.Second)
	if ready() {
		t.Fatal("the Pod is Ready without a ready-at annotation")
	}
	at := time.Now().Add(2 * time.Second)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, ReadyAtAnnotation, at.UTC().Format(time.RFC3339Nano))
	if _, err := pods.Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for !ready() {
		if ctx.Err() != nil {
			t.Fatal("the Pod is not Ready by the test's deadline")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if early := time.Until(at); early > 0 {
		t.Errorf("the Pod was Ready %v before its ready-at time", early)
	}
}

// A Kwok started on a cluster it did not start runs the nodes it adds
// (a Pod bound to one becomes Ready) beside the cluster's own kwok, and
// Stop deletes them and stops it.
func TestStartKwok(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, WithoutAgentSandbox(), WithNodes(FakeNodes("cluster", 1, DefaultCapacity(), nil)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(false); err != nil {
			t.Error(err)
		}
	})
	kwok, err := StartKwok(ctx, c.Kubeconfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = kwok.Stop()
		}
	})
	if err := kwok.AddNodes(ctx, FakeNodes("own", 1, DefaultCapacity(), nil)...); err != nil {
		t.Fatal(err)
	}
	pods := c.kube.CoreV1().Pods(metav1.NamespaceDefault)
	for _, node := range []string{"cluster-0", "own-0"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "on-" + node}, Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/task:1"}}}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := poll(ctx, "pod "+pod.Name+" to be Ready", func(ctx context.Context) error {
			p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("pod %s is not Ready", pod.Name)
		}); err != nil {
			t.Fatal(err)
		}
	}

	pid := kwok.proc.Pid()
	stopped = true
	if err := kwok.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kwok (pid %d) still exists after Stop: %v", pid, err)
	}
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	if len(names) != 1 || names[0] != "cluster-0" {
		t.Errorf("nodes after Stop: %v, want only the cluster's cluster-0", names)
	}
}
