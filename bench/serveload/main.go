// Command serveload loads one `kubectl sandbox-fleet serve` — the plugin
// built as it ships, on the local test cluster's kwok nodes and the real
// Agent Sandbox controller — with many trainer processes at once, as a
// distributed trainer's rollout workers reach one session: C client
// processes (bench/serveload/client.py, sandbox_fleet), each warming a
// pool of its own image and then running R rollouts at once (acquire,
// release; no exec), each of its tasks once. Any failed call fails the
// run. Reported: rollouts/s, time-to-sandbox p50 and p99, and serve's
// CPU per 1,000 rollouts over the load and its peak RSS.
//
//	go run ./bench/serveload                          # 8 clients × 64 at once, 2 rollouts a slot
//	go run ./bench/serveload -clients 8 -concurrency 64 -rounds 4
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/benchcluster"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/proc"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testpython"
)

const plugin = "kubectl-sandbox_fleet"

// result is what a client printed.
type result struct {
	Rollouts, Failed int
	Errors           []string
	Latencies        []float64
	Wall             float64
}

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	clients := flag.Int("clients", 8, "client processes (C)")
	concurrency := flag.Int("concurrency", 64, "rollouts at once per client (R)")
	rounds := flag.Int("rounds", 2, "rollouts per slot: each client runs R × rounds tasks")
	nodes := flag.Int("nodes", 8, "kwok nodes")
	flag.Parse()
	if err := run(*clients, *concurrency, *rounds, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "serveload:", err)
		os.Exit(1)
	}
}

func run(clients, concurrency, rounds, nodes int) (err error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	b, err := benchcluster.Start(ctx, "serveload", benchcluster.Options{
		Build:   func(dir string) error { _, err := testcluster.BuildCommand(dir, plugin); return err },
		Cluster: []testcluster.Option{testcluster.WithNodes(testcluster.FakeNodes("kwok-node", nodes, testcluster.DefaultCapacity(), nil)...)},
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Stop()) }()
	ns, err := testcluster.CreateNamespace(ctx, b.Clients.Kube, "serveload-")
	if err != nil {
		return err
	}
	here, err := benchDir()
	if err != nil {
		return err
	}

	sock := filepath.Join(b.Dir, "serve.sock")
	serve := exec.CommandContext(ctx, filepath.Join(b.Dir, plugin), "serve", "--kubeconfig", b.Cluster.Kubeconfig(), "-n", ns,
		"--listen", "unix://"+sock, "--max-concurrent", strconv.Itoa(clients*concurrency), "--max-warmpool-size", strconv.Itoa(concurrency))
	serve.Stderr = os.Stderr
	out, err := serve.StdoutPipe()
	if err != nil {
		return err
	}
	if err := serve.Start(); err != nil {
		return err
	}
	defer func() {
		// SIGTERM tears the session down; wait for it.
		_ = serve.Process.Signal(syscall.SIGTERM)
		if werr := serve.Wait(); werr != nil {
			err = errors.Join(err, fmt.Errorf("serve: %w", werr))
		}
	}()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("serve did not start: %w", err)
	}
	addr = strings.TrimSpace(addr)

	fmt.Printf("serve under load: %d client processes × %d rollouts at once (acquire, release), %d rollouts, %d kwok nodes, %d CPUs\n",
		clients, concurrency, clients*concurrency*rounds, nodes, runtime.NumCPU())
	workers := make([]*worker, clients)
	for k := range workers {
		if workers[k], err = startWorker(ctx, testpython.Python(), filepath.Join(here, "client.py"), addr, k, concurrency, rounds); err != nil {
			return err
		}
		defer workers[k].stop()
	}
	for k, w := range workers {
		if line, err := w.line(); err != nil || line != "ready" {
			return fmt.Errorf("client %d: %q, %v", k, line, err)
		}
	}
	cpu0, err := proc.CPU(serve.Process.Pid)
	if err != nil {
		return err
	}
	start := time.Now()
	for _, w := range workers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return err
		}
	}
	var latencies []float64
	rollouts, failed := 0, 0
	for k, w := range workers {
		line, err := w.line()
		if err != nil {
			return fmt.Errorf("client %d: %w", k, err)
		}
		var r result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("client %d: %q: %w", k, line, err)
		}
		rollouts += r.Rollouts
		failed += r.Failed
		latencies = append(latencies, r.Latencies...)
		for _, e := range r.Errors {
			fmt.Printf("client %d: %s\n", k, e)
		}
	}
	wall := time.Since(start)
	cpu1, err := proc.CPU(serve.Process.Pid)
	if err != nil {
		return err
	}
	_, peak, _, err := proc.Memory(serve.Process.Pid)
	if err != nil {
		return err
	}
	per1000 := (cpu1 - cpu0).Seconds() * 1000 / float64(rollouts)
	fmt.Printf("%-9s %-11s %-9s %-9s %-28s %s\n", "rollouts", "rollouts/s", "p50", "p99", "serve CPU per 1,000 rollouts", "serve peak RSS")
	fmt.Printf("%-9d %-11.1f %-9s %-9s %-28s %s\n", rollouts, float64(rollouts)/wall.Seconds(),
		ms(stats.Percentile(latencies, 0.5)), ms(stats.Percentile(latencies, 0.99)), fmt.Sprintf("%.2f s", per1000), proc.MiB(peak))
	if failed > 0 {
		return fmt.Errorf("%d of %d rollouts failed", failed, rollouts)
	}
	return nil
}

func ms(seconds float64) string { return fmt.Sprintf("%.0f ms", 1000*seconds) }

// worker is a client process, read line by line.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startWorker(ctx context.Context, python, script, addr string, k, concurrency, rounds int) (*worker, error) {
	cmd := exec.CommandContext(ctx, python, script, addr, strconv.Itoa(k), strconv.Itoa(concurrency), strconv.Itoa(rounds))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &worker{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(out, 1<<20)}, nil
}

func (w *worker) line() (string, error) {
	l, err := w.out.ReadString('\n')
	return strings.TrimSpace(l), err
}

// stop ends the client, killing it when it has not ended already.
func (w *worker) stop() {
	w.stdin.Close()
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

// benchDir is this benchmark's source directory, where client.py is.
func benchDir() (string, error) {
	root, err := testcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bench", "serveload"), nil
}
