// Command claims benchmarks the fleet engine's claim path against a
// bare-minimum client on the local test cluster (kwok nodes, the real Agent
// Sandbox controller), measured in one run with the clients alternating:
//
//	go run ./bench/claims            # both scenarios, 2 rounds
//	go run ./bench/claims -rounds 3 -scenarios overhead
//
// Each trial runs in a child process of its own, in a namespace of its own,
// so its CPU time and peak RSS are the client's alone. Clients:
//
//   - bare: the least a competent engineer would write — the same templates
//     and warm pools, then per task create a claim, wait for it to be Ready
//     and delete it; one informer per kind, no deep copies, each waiter woken
//     only by events of its own claim; at the end it deletes its pools and
//     templates and waits until its Pods are gone.
//   - engine: fleet.Open + Run with no work, as configured by default.
//   - engine-paced: the same with warm claim pacing.
//   - engine-traced: engine with tracing on, exporting every span over
//     OTLP/gRPC to a receiver in the parent (internal/otlptree).
//
// Scenarios:
//
//   - overhead: 1,000 claims at concurrency 100 over 10 images whose pools
//     hold 100 warm sandboxes in all. Targets: the engine's time-to-sandbox
//     p99 within 1.05× and claims/s at least 0.95× of the bare client's,
//     client CPU within 1.2×, at most 3 API requests per task besides watches.
//   - saturated: 1,000 claims at concurrency 50 over 25 images with pools of
//     2 (50 warm in all), where the control plane falls behind and claims
//     go cold; shows the warm share and wall time claim pacing buys at the
//     same peak warm footprint.
//   - run: 200 tasks at concurrency 50 over 20 images with pools of 2 (40
//     warm), the whole process: start to first claim, and last task to
//     nothing of the run left (claims, pools, templates, Sandboxes, Pods, as
//     the API server lists them).
//
// The warm share is read from the agents.x-k8s.io/launch-type label the
// controller puts on each claimed Sandbox, observed by a watch in the
// parent. API requests are counted in the client (every request but
// watches) and cross-checked with the API server's apiserver_request_total
// for sandboxclaims creates and deletes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/internal/otlptree"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
)

// scenario is a batch shape.
type scenario struct {
	Name                 string
	Tasks, Images        int
	Concurrency, Replica int
}

var scenarios = map[string]scenario{
	"overhead":  {Name: "overhead", Tasks: 1000, Images: 10, Concurrency: 100, Replica: 10},
	"saturated": {Name: "saturated", Tasks: 1000, Images: 25, Concurrency: 50, Replica: 2},
	"run":       {Name: "run", Tasks: 200, Images: 20, Concurrency: 50, Replica: 2},
}

var allClients = []string{"bare", "engine", "engine-paced", "engine-traced"}

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	trial := flag.String("trial", "", "internal: run one trial of this client in this process")
	kubeconfig := flag.String("kubeconfig", "", "internal: the cluster of the trial")
	namespace := flag.String("namespace", "", "internal: the namespace of the trial")
	shape := flag.String("scenario", "", "internal: the scenario of the trial")
	rounds := flag.Int("rounds", 2, "rounds; each runs every client once, in rotating order")
	names := flag.String("scenarios", "overhead,saturated,run", "scenarios to run")
	nodes := flag.Int("nodes", 6, "kwok nodes")
	out := flag.String("o", "", "also write the results here as JSON")
	clientNames := flag.String("clients", strings.Join(allClients, ","), "clients to compare")
	flag.Parse()

	if *trial != "" {
		if err := runTrial(*trial, *kubeconfig, *namespace, scenarios[*shape]); err != nil {
			fmt.Fprintf(os.Stderr, "trial %s: %v\n", *trial, err)
			os.Exit(1)
		}
		return
	}
	clients := strings.Split(*clientNames, ",")
	for _, c := range clients {
		if !slices.Contains(allClients, c) {
			fmt.Fprintf(os.Stderr, "bench: unknown client %q; use %s\n", c, strings.Join(allClients, ","))
			os.Exit(2)
		}
	}
	if err := run(*rounds, strings.Split(*names, ","), clients, *nodes, *out); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(rounds int, names, clients []string, nodes int, out string) error {
	// Ctrl-C stops the trial in flight and then the cluster, cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "starting the local cluster with %d kwok nodes\n", nodes)
	cluster, err := testcluster.Start(ctx, testcluster.WithNodes(testcluster.FakeNodes("bench", nodes, testcluster.DefaultCapacity(), nil)...))
	if err != nil {
		return err
	}
	defer func() {
		if err := cluster.Stop(false); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the cluster: %v\n", err)
		}
	}()
	receiver, err := otlptree.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer receiver.Stop()
	obs, err := observe(ctx, cluster)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var all []summary
	for _, name := range names {
		sc, ok := scenarios[name]
		if !ok {
			return fmt.Errorf("unknown scenario %q", name)
		}
		measured := map[string][]measurement{}
		for r := range rounds {
			for i := range clients {
				client := clients[(i+r)%len(clients)]
				m, err := trial(ctx, cluster, obs, receiver, self, client, sc)
				if err != nil {
					return fmt.Errorf("%s round %d %s: %w", sc.Name, r+1, client, err)
				}
				fmt.Fprintf(os.Stderr, "%s round %d %-15s p50 %.3fs p99 %.3fs %.1f claims/s warm %.0f%% %.2f req/task cpu %.1fs rss %.0fMiB wall %.1fs start %.2fs teardown %.2fs process %.1fs\n",
					sc.Name, r+1, client, m.P50, m.P99, m.ClaimsPerSec, 100*m.WarmShare, m.RequestsPerTask, m.CPUSeconds, m.RSSMiB, m.WallSeconds,
					m.StartToFirstClaim, m.TeardownSeconds, m.ProcessWallSeconds)
				fmt.Fprintf(os.Stderr, "  requests/task by kind: %s\n", byKind(m.RequestsByKind))
				measured[client] = append(measured[client], m)
			}
		}
		for _, client := range clients {
			all = append(all, summarize(sc, client, measured[client]))
		}
	}
	printTable(os.Stdout, all)
	if out != "" {
		b, err := json.MarshalIndent(all, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	}
	return nil
}

// trial runs one client in a child process on a fresh namespace.
func trial(ctx context.Context, cluster *testcluster.Cluster, obs *observer, receiver *otlptree.Receiver, self, client string, sc scenario) (measurement, error) {
	ns, err := newNamespace(ctx, cluster)
	if err != nil {
		return measurement{}, err
	}
	defer deleteNamespace(cluster, ns)
	before, err := claimRequests(ctx, cluster)
	if err != nil {
		return measurement{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-trial", client, "-kubeconfig", cluster.Kubeconfig(), "-namespace", ns, "-scenario", sc.Name)
	cmd.Stderr = os.Stderr
	if client == "engine-traced" {
		cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+receiver.Endpoint())
	}
	spansBefore := len(receiver.Spans())
	// A trial must not outlive the benchmark.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	stdout, err := cmd.Output()
	if err != nil {
		return measurement{}, err
	}
	processWall := time.Since(started)
	if client == "engine-traced" && len(receiver.Spans()) < spansBefore+sc.Tasks {
		return measurement{}, fmt.Errorf("the traced engine sent %d spans for %d tasks", len(receiver.Spans())-spansBefore, sc.Tasks)
	}
	var res trialResult
	if err := json.Unmarshal(stdout, &res); err != nil {
		return measurement{}, fmt.Errorf("reading the trial's result: %w", err)
	}
	after, err := claimRequests(ctx, cluster)
	if err != nil {
		return measurement{}, err
	}
	usage := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	m := res.measure(sc)
	m.CPUSeconds = time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
	m.RSSMiB = float64(usage.Maxrss) / 1024
	m.ServerClaimRequestsPerTask = (after - before) / float64(sc.Tasks)
	m.ProcessWallSeconds = processWall.Seconds()
	m.WarmShare = obs.warmShare(ns, res.Sandboxes)
	return m, nil
}
