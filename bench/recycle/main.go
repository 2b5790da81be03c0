// Command recycle measures sandbox recycling on the local cluster's real
// node — containerd, runc and a kubelet on this machine, the SWE-bench-like
// test images from the loopback registry — in one run:
//
//   - the RL shape: G rollouts of each of P problem images, at most C at
//     once, run by the fleet engine with a fresh claim per rollout and
//     recycled (one sandbox per image, reset between its rollouts), the
//     two alternating within each round. Each rollout fixes the problem,
//     runs its tests and commits. Reported: wall time (warming included),
//     claims per rollout, and each rollout's turnaround: the time its
//     slot spends between rollouts — getting the sandbox (claim, and the
//     first use's record) and giving it back (release, or the reset);
//
//   - an agent loop of N small commands in one sandbox (cat, ls, grep, git
//     status), each by an exec of its own or over one persistent shell
//     (exec.Shell), alternating in blocks of 20: p50 and p99 per command.
//
//     go run ./bench/recycle [-rounds 3] [-problems 3] [-group 8] [-concurrency 6] [-commands 200]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// shape is the RL batch.
type shape struct{ problems, group, concurrency int }

// rollout is what each rollout does in its sandbox.
const rollout = `cd /testbed && sed -i 's/a - b/a + b/' calc.py && python3 -m unittest -q 2>/dev/null &&
git -c user.email=bench@example.com -c user.name=bench commit -q -am rollout && echo done >/tmp/rollout`

// agentCommands are the small commands of the agent loop, in turn.
var agentCommands = [][]string{
	{"cat", "/testbed/calc.py"},
	{"ls", "-la", "/testbed"},
	{"grep", "-n", "def", "/testbed/calc.py"},
	{"git", "-C", "/testbed", "status", "--short"},
}

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	rounds := flag.Int("rounds", 3, "rounds; each runs the RL shape fresh and recycled, in alternating order, and the agent loop")
	var sh shape
	flag.IntVar(&sh.problems, "problems", 3, "problem images (P)")
	flag.IntVar(&sh.group, "group", 8, "rollouts per problem (G)")
	flag.IntVar(&sh.concurrency, "concurrency", 6, "rollouts at once (C)")
	commands := flag.Int("commands", 200, "commands of the agent loop, each way")
	flag.Parse()
	if sh.problems > testimages.ProblemCount {
		fmt.Fprintf(os.Stderr, "-problems %d: there are %d problem images\n", sh.problems, testimages.ProblemCount)
		os.Exit(2)
	}
	if err := run(*rounds, *commands, sh); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// rlResult is one run of the RL shape.
type rlResult struct {
	wall       float64
	claims     int
	tasks      int
	turnaround []float64
}

func run(rounds, commands int, sh shape) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	c, err := testcluster.Start(ctx, testcluster.WithRealNode(), testcluster.WithNodes())
	if err != nil {
		return err
	}
	defer c.Stop(false)
	fmt.Printf("RL shape: %d problems × G=%d, %d at once; agent loop: %d commands each way; %d rounds, real node\n",
		sh.problems, sh.group, sh.concurrency, commands, rounds)
	// The node pulls each image once, before anything is measured.
	if _, err := rl(ctx, c, shape{problems: sh.problems, group: 1, concurrency: sh.problems}, false); err != nil {
		return fmt.Errorf("pulling the images: %w", err)
	}
	all := map[bool][]rlResult{}
	var perExec, perShell []float64
	for r := range rounds {
		for i := range 2 {
			recycled := (r+i)%2 == 1
			res, err := rl(ctx, c, sh, recycled)
			if err != nil {
				return fmt.Errorf("round %d, recycled %v: %w", r+1, recycled, err)
			}
			fmt.Printf("round %d %-8s wall %6.1f s  claims/rollout %.2f  turnaround p50 %5.2f s  mean %5.2f s\n",
				r+1, mode(recycled), res.wall, float64(res.claims)/float64(res.tasks), stats.Percentile(res.turnaround, 0.50), stats.Mean(res.turnaround))
			all[recycled] = append(all[recycled], res)
		}
		e, s, err := agentLoop(ctx, c, commands)
		if err != nil {
			return fmt.Errorf("round %d, agent loop: %w", r+1, err)
		}
		fmt.Printf("round %d agent    exec p50 %5.1f ms p99 %5.1f ms  session p50 %5.1f ms p99 %5.1f ms\n",
			r+1, 1000*stats.Percentile(e, 0.50), 1000*stats.Percentile(e, 0.99), 1000*stats.Percentile(s, 0.50), 1000*stats.Percentile(s, 0.99))
		perExec, perShell = append(perExec, e...), append(perShell, s...)
	}
	report(all, perExec, perShell)
	return nil
}

func mode(recycled bool) string {
	if recycled {
		return "recycled"
	}
	return "fresh"
}

// rl runs the RL shape through the fleet engine in a namespace of its own.
func rl(ctx context.Context, c *testcluster.Cluster, sh shape, recycled bool) (rlResult, error) {
	clients, err := c.Clients("default")
	if err != nil {
		return rlResult{}, err
	}
	ns, err := testcluster.CreateNamespace(ctx, clients.Kube, "bench-")
	if err != nil {
		return rlResult{}, err
	}
	if clients, err = c.Clients(ns); err != nil {
		return rlResult{}, err
	}
	cfg := benchConfig(sh.concurrency)
	cfg.Recycle.Enabled = recycled
	var ts []tasks.Task
	for g := range sh.group {
		for p := 1; p <= sh.problems; p++ {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("p%d-g%d", p, g), Image: testimages.Problem(p)})
		}
	}
	f, err := fleet.Open(ctx, "bench-recycle", cfg, ts, []fleet.Target{{Config: config.Cluster{Name: "bench", Weight: 1}, Clients: clients}})
	if err != nil {
		return rlResult{}, err
	}
	defer f.Close()
	res := rlResult{tasks: len(ts)}
	var mu sync.Mutex
	var failed error
	rep, err := f.Run(ctx, fleet.RunOptions{Work: fleet.ExecWork([]string{"sh", "-c", rollout}, nil), OnResult: func(r fleet.Result) {
		mu.Lock()
		defer mu.Unlock()
		if !r.OK && failed == nil {
			failed = fmt.Errorf("rollout %s: %s\n%s", r.ID, r.Error, r.Stderr)
		}
		res.turnaround = append(res.turnaround, r.Phases["claim"]+r.Phases["release"])
	}})
	if err != nil {
		return rlResult{}, err
	}
	if failed != nil {
		return rlResult{}, failed
	}
	res.wall, res.claims = rep.WallSeconds, rep.Claims
	return res, nil
}

// benchConfig is the runs' configuration: naive, pools sized by the
// concurrency, sandboxes small enough for the pools and the claims of
// either way to fit the node's CPUs.
func benchConfig(concurrency int) config.Fleet {
	cfg := config.Default()
	cfg.MaxConcurrent = concurrency
	cfg.ReadyTimeout.Duration = 5 * time.Minute
	cfg.Template.Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	return cfg
}

// agentLoop claims one sandbox and runs commands small commands in it
// each way — an exec each, and over one shell — alternating in blocks of
// 20, and returns the seconds each command took, each way.
func agentLoop(ctx context.Context, c *testcluster.Cluster, commands int) (perExec, perShell []float64, err error) {
	clients, err := c.Clients("default")
	if err != nil {
		return nil, nil, err
	}
	ns, err := testcluster.CreateNamespace(ctx, clients.Kube, "bench-")
	if err != nil {
		return nil, nil, err
	}
	if clients, err = c.Clients(ns); err != nil {
		return nil, nil, err
	}
	t := tasks.Task{ID: "agent", Image: testimages.Problem(1)}
	f, err := fleet.Open(ctx, "bench-agent", benchConfig(1), []tasks.Task{t}, []fleet.Target{{Config: config.Cluster{Name: "bench", Weight: 1}, Clients: clients}})
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	defer func() { err = errors.Join(err, f.Teardown(context.WithoutCancel(ctx))) }()
	if err := f.Warm(ctx, []string{t.Image}, func(string) int { return 1 }); err != nil {
		return nil, nil, err
	}
	s, err := f.Acquire(ctx, t, nil)
	if err != nil {
		return nil, nil, err
	}
	sh := exec.OpenShell(ctx, func(ctx context.Context, r exec.Request) (int, error) {
		res, err := s.Exec(ctx, r)
		return res.ExitCode, err
	}, exec.Request{}, exec.ShellSh)
	defer sh.Close()
	const block = 20
	for n := 0; n < commands; n += block {
		for i := n; i < min(n+block, commands); i++ {
			argv := agentCommands[i%len(agentCommands)]
			start := time.Now()
			res, err := s.Exec(ctx, exec.Request{Command: argv, Stdout: io.Discard, Stderr: io.Discard})
			if err != nil || res.ExitCode != 0 {
				return nil, nil, fmt.Errorf("exec %q: exit %d, %v", argv, res.ExitCode, err)
			}
			perExec = append(perExec, time.Since(start).Seconds())
			start = time.Now()
			res, err = sh.Run(ctx, exec.Command{Argv: argv}, io.Discard, io.Discard)
			if err != nil || res.ExitCode != 0 {
				return nil, nil, fmt.Errorf("session %q: exit %d, %v", argv, res.ExitCode, err)
			}
			perShell = append(perShell, time.Since(start).Seconds())
		}
	}
	return perExec, perShell, nil
}

func report(all map[bool][]rlResult, perExec, perShell []float64) {
	fresh, recycled := all[false], all[true]
	var walls, walRatio, freshClaims, recClaims, freshTurn, recTurn []float64
	for i := range min(len(fresh), len(recycled)) {
		walRatio = append(walRatio, recycled[i].wall/fresh[i].wall)
	}
	for _, r := range fresh {
		walls = append(walls, r.wall)
		freshClaims = append(freshClaims, float64(r.claims)/float64(r.tasks))
		freshTurn = append(freshTurn, r.turnaround...)
	}
	var recWalls []float64
	for _, r := range recycled {
		recWalls = append(recWalls, r.wall)
		recClaims = append(recClaims, float64(r.claims)/float64(r.tasks))
		recTurn = append(recTurn, r.turnaround...)
	}
	fmt.Println()
	fmt.Println("| way | wall (median) | claims per rollout | turnaround p50 | p99 |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	fmt.Printf("| fresh claims | %.1f s | %.2f | %.2f s | %.2f s |\n", stats.Median(walls), stats.Median(freshClaims), stats.Percentile(freshTurn, 0.50), stats.Percentile(freshTurn, 0.99))
	fmt.Printf("| recycled | %.1f s | %.2f | %.2f s | %.2f s |\n", stats.Median(recWalls), stats.Median(recClaims), stats.Percentile(recTurn, 0.50), stats.Percentile(recTurn, 0.99))
	fmt.Printf("\nrecycled ÷ fresh, wall, per round: %s → median %.2f (target ≤ 0.6)\n", list(walRatio), stats.Median(walRatio))
	fmt.Println()
	fmt.Println("| agent loop | p50 | p99 |")
	fmt.Println("| --- | --- | --- |")
	fmt.Printf("| an exec per command | %.1f ms | %.1f ms |\n", 1000*stats.Percentile(perExec, 0.50), 1000*stats.Percentile(perExec, 0.99))
	fmt.Printf("| one session | %.1f ms | %.1f ms |\n", 1000*stats.Percentile(perShell, 0.50), 1000*stats.Percentile(perShell, 0.99))
	fmt.Printf("\nsession ÷ exec, p50: %.2f (target ≤ 0.3)\n", stats.Percentile(perShell, 0.50)/stats.Percentile(perExec, 0.50))
}

func list(xs []float64) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%.2f", x)
	}
	return out
}
