// Command serve benchmarks the training-loop path on the local test cluster
// (kwok nodes, the real Agent Sandbox controller): the same RL-shaped loop —
// S steps, each P problem images × G rollouts at once, each rollout acquire
// then release — driven three ways, alternating in one run:
//
//   - python-serve: a Python trainer with sandbox_fleet (bench/serve/trainer.py)
//     against a fleet session served as `kubectl sandbox-fleet serve` serves it;
//   - go-engine: the same session driven in process by Go, no server;
//   - python-bare: a Python trainer with Debian's python3-kubernetes, as
//     trainers do it today (bench/serve/bare.py): create a claim, watch it
//     until Ready, delete it.
//
// Every client gets the same warm pools (G replicas per image, warm before
// its loop starts) in a namespace of its own, and runs in processes of its
// own, so CPU is counted per process over the loop alone.
//
//	go run ./bench/serve                 # 3 rounds
//	go run ./bench/serve -rounds 5 -steps 4 -problems 4 -group 8
//
// With -shape agent it measures the agent loop instead, on the real node
// (containerd and a kubelet on this machine): R rollouts at once, each
// running N small commands in its own sandbox one after another, through
// serve over a shell (Python, sandbox_fleet's h.shell().run) and over an
// exec per command (h.exec), and the same execs by Go on the session in
// process. Reported: per command p50 and p99, trainer and serve CPU per
// command, serve's added latency (its exec against the engine's) and the
// ratio shell ÷ exec (issue 40's target: ≤ 0.3 at p50).
//
//	go run ./bench/serve -shape agent -rounds 3 -rollouts 64 -commands 50
//
// Targets (issue 19): through serve, time-to-sandbox p99 ≤ 1.05× the engine
// in process; against the bare client, at least as many sandboxes/s, p99 no
// worse, trainer CPU ≤ 0.3×.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/internal/serve"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testpython"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// shape is the RL-shaped loop.
type shape struct{ Steps, Problems, Group int }

func (s shape) args() []string {
	return []string{fmt.Sprint(s.Steps), fmt.Sprint(s.Problems), fmt.Sprint(s.Group)}
}

// tasks are the loop's rollouts, as trainer.py names them.
func (s shape) tasks() []tasks.Task {
	var out []tasks.Task
	for st := range s.Steps {
		for p := range s.Problems {
			for g := range s.Group {
				out = append(out, tasks.Task{ID: fmt.Sprintf("s%d-p%d-g%d", st, p, g), Image: fmt.Sprintf("bench.example/problem-%d-%d:v1", st, p)})
			}
		}
	}
	return out
}

// result is one client's loop.
type result struct {
	Latencies []float64 `json:"latencies"`
	Wall      float64   `json:"wall"`
	CPU       float64   `json:"cpu"`
	Tasks     int       `json:"tasks"`
	// Requests are the API requests made over the loop, watches excepted;
	// Watches those that were.
	Requests int64 `json:"requests"`
	Watches  int64 `json:"watches"`
	// ServerCPU is serve's CPU over the loop (python-serve).
	ServerCPU float64 `json:"serverCPU,omitempty"`
}

var clients = []string{"python-serve", "go-engine", "python-bare"}

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	child := flag.String("child", "", "internal: run this part in this process")
	kubeconfig := flag.String("kubeconfig", "", "internal: the cluster")
	namespace := flag.String("namespace", "", "internal: the namespace")
	socket := flag.String("socket", "", "internal: serve's socket")
	rounds := flag.Int("rounds", 3, "rounds; each runs every client once, in rotating order")
	var sh shape
	flag.IntVar(&sh.Steps, "steps", 4, "training steps (S)")
	flag.IntVar(&sh.Problems, "problems", 4, "problem images per step (P)")
	flag.IntVar(&sh.Group, "group", 8, "rollouts per problem per step (G)")
	nodes := flag.Int("nodes", 6, "kwok nodes")
	shapeName := flag.String("shape", "rl", "rl: the RL-shaped acquire loop on kwok nodes; agent: the agent loop of commands on the real node")
	var ag agentShape
	flag.IntVar(&ag.Rollouts, "rollouts", 64, "agent shape: rollouts at once (R)")
	flag.IntVar(&ag.Commands, "commands", 50, "agent shape: commands per rollout per round (N)")
	split := flag.Bool("split", true, "run the control plane on CPU 0 and the clients on the other CPUs, as a real cluster keeps them apart")
	flag.Parse()
	if *shapeName != "rl" && *shapeName != "agent" {
		fmt.Fprintf(os.Stderr, "-shape %q: use rl or agent\n", *shapeName)
		os.Exit(2)
	}
	if *child != "" {
		if err := runChild(*child, *kubeconfig, *namespace, *socket, sh, *shapeName == "agent", ag, *rounds); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", *child, err)
			os.Exit(1)
		}
		return
	}
	var err error
	if *shapeName == "agent" {
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runAgent(ctx, *rounds, ag)
		cancel()
	} else {
		err = run(*rounds, *nodes, *split, sh)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(rounds, nodes int, split bool, sh shape) error {
	if err := exec.Command(testpython.Python(), "-c", "import kubernetes").Run(); err != nil {
		return fmt.Errorf("the bare client needs Debian's python3-kubernetes: apt-get install python3-kubernetes (%v)", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	opts := []testcluster.Option{testcluster.WithNodes(testcluster.FakeNodes("kwok-node", nodes, testcluster.DefaultCapacity(), nil)...)}
	if split {
		// The clients (this process's children) inherit CPUs 1..; the
		// control plane gets CPU 0.
		cpus := make([]int, 0, runtime.NumCPU()-1)
		for cpu := 1; cpu < runtime.NumCPU(); cpu++ {
			cpus = append(cpus, cpu)
		}
		if len(cpus) == 0 {
			return fmt.Errorf("-split needs at least two CPUs; use -split=false")
		}
		if err := testcluster.PinThisProcess(cpus...); err != nil {
			return err
		}
		opts = append(opts, testcluster.WithCPUs(0))
	}
	c, err := testcluster.Start(ctx, opts...)
	if err != nil {
		return err
	}
	defer c.Stop(false)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("RL-shaped loop: %d steps × %d problems × G=%d (%d rollouts, %d at once), %d kwok nodes, %d rounds, control plane apart: %v\n",
		sh.Steps, sh.Problems, sh.Group, sh.Steps*sh.Problems*sh.Group, sh.Problems*sh.Group, nodes, rounds, split)
	all := map[string][]result{}
	for r := range rounds {
		for i := range clients {
			name := clients[(r+i)%len(clients)]
			ns, err := newNamespace(ctx, c)
			if err != nil {
				return err
			}
			res, err := trial(ctx, self, name, c.Kubeconfig(), ns, sh)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, name, err)
			}
			fmt.Printf("round %d %-13s p50 %6.1f ms  p99 %6.1f ms  %6.1f sandboxes/s  trainer CPU %5.2f s  serve CPU %5.2f s\n",
				r+1, name, 1000*stats.Percentile(res.Latencies, 0.50), 1000*stats.Percentile(res.Latencies, 0.99), float64(res.Tasks)/res.Wall, res.CPU, res.ServerCPU)
			all[name] = append(all[name], res)
		}
	}
	report(all)
	return nil
}

func newNamespace(ctx context.Context, c *testcluster.Cluster) (string, error) {
	clients, err := c.Clients("default")
	if err != nil {
		return "", err
	}
	return testcluster.CreateNamespace(ctx, clients.Kube, "bench-")
}

// trial runs one client's loop and returns its result.
func trial(ctx context.Context, self, name, kubeconfig, ns string, sh shape) (result, error) {
	here, err := benchDir()
	if err != nil {
		return result{}, err
	}
	childArgs := func(child string, extra ...string) []string {
		return append([]string{"-child", child, "-kubeconfig", kubeconfig, "-namespace", ns,
			"-steps", fmt.Sprint(sh.Steps), "-problems", fmt.Sprint(sh.Problems), "-group", fmt.Sprint(sh.Group)}, extra...)
	}
	switch name {
	case "go-engine":
		var res result
		out, err := exec.CommandContext(ctx, self, childArgs("engine")...).Output()
		if err != nil {
			return res, childError(err)
		}
		return res, json.Unmarshal(out, &res)
	case "python-serve":
		sock, cleanup, err := socketPath("bench-serve")
		if err != nil {
			return result{}, err
		}
		defer cleanup()
		server, err := startLines(ctx, self, childArgs("serve", "-socket", sock)...)
		if err != nil {
			return result{}, err
		}
		defer server.stop()
		if _, err := server.line(); err != nil { // ready
			return result{}, err
		}
		return around(ctx, server, testpython.Python(), append([]string{filepath.Join(here, "trainer.py"), "unix://" + sock}, sh.args()...)...)
	default: // python-bare
		warmer, err := startLines(ctx, self, childArgs("warm")...)
		if err != nil {
			return result{}, err
		}
		defer warmer.stop()
		pools, err := warmer.line()
		if err != nil {
			return result{}, err
		}
		return around(ctx, nil, testpython.Python(), append([]string{filepath.Join(here, "bare.py"), kubeconfig, ns, "bench", pools}, sh.args()...)...)
	}
}

// around runs a Python trainer that prints "start" then its result, and
// reads server's CPU and requests at both.
func around(ctx context.Context, server *lines, python string, args ...string) (result, error) {
	trainer, err := startLines(ctx, python, args...)
	if err != nil {
		return result{}, err
	}
	defer trainer.stop()
	if l, err := trainer.line(); err != nil || l != "start" {
		return result{}, fmt.Errorf("trainer: %q, %v", l, err)
	}
	var before, after result
	if server != nil {
		if before, err = server.probe(); err != nil {
			return result{}, err
		}
	}
	l, err := trainer.line()
	if err != nil {
		return result{}, err
	}
	var res result
	if err := json.Unmarshal([]byte(l), &res); err != nil {
		return res, fmt.Errorf("trainer: %w: %s", err, l)
	}
	if server != nil {
		if after, err = server.probe(); err != nil {
			return result{}, err
		}
		res.ServerCPU, res.Requests = after.CPU-before.CPU, after.Requests-before.Requests
	}
	return res, nil
}

// lines is a child process read line by line.
type lines struct {
	cmd *exec.Cmd
	out *bufio.Scanner
}

func startLines(ctx context.Context, bin string, args ...string) (*lines, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &lines{cmd: cmd, out: newScanner(stdout)}, nil
}

func newScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	return sc
}

func (l *lines) line() (string, error) {
	if !l.out.Scan() {
		return "", fmt.Errorf("%s ended early: %v", filepath.Base(l.cmd.Path), l.out.Err())
	}
	return l.out.Text(), nil
}

// probe asks a serve child for its CPU and request count so far.
func (l *lines) probe() (result, error) {
	if err := l.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return result{}, err
	}
	s, err := l.line()
	if err != nil {
		return result{}, err
	}
	var r result
	return r, json.Unmarshal([]byte(s), &r)
}

// stop ends a child with SIGTERM (a session child tears down first); a
// second stop does nothing.
func (l *lines) stop() {
	if l.cmd.ProcessState != nil {
		return
	}
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	_ = l.cmd.Wait()
}

func childError(err error) error {
	if ee, ok := err.(*exec.ExitError); ok {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

func benchDir() (string, error) {
	root, err := testcluster.RepoRoot()
	return filepath.Join(root, "bench", "serve"), err
}

// runChild is one part of a trial, in a process of its own.
func runChild(child, kubeconfig, namespace, socket string, sh shape, agent bool, ag agentShape, rounds int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	var requests, watches atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return counting{next: rt, n: &requests, watches: &watches}
	})
	clients, err := kube.ForConfig(cfg, namespace)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	fc := config.Default()
	fc.MaxConcurrent, fc.MaxWarmPoolSize, fc.WarmPerTask = sh.Problems*sh.Group, sh.Group, true
	ts := sh.tasks()
	if agent {
		fc, ts = agentConfig(ag), agentTasks(ag)
	}
	targets := []fleet.Target{{Config: config.Cluster{Name: "bench", Weight: 1}, Clients: clients}}
	// Through serve the trainer adds the tasks itself.
	if child == "serve" {
		ts = nil
	}
	s, err := session.Open(ctx, "bench", fc, ts, targets, session.Options{})
	if err != nil {
		return err
	}
	defer func() {
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer tcancel()
		if err := s.Close(tctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	if agent {
		return agentChild(ctx, child, s, socket, ag, rounds, &requests)
	}
	switch child {
	case "serve":
		return serveSession(ctx, s, socket, &requests)
	case "warm":
		images, err := warmAll(ctx, s)
		if err != nil {
			return err
		}
		pools := map[string]string{}
		for _, img := range images {
			pools[img] = resources.PoolName(s.RunID(), img)
		}
		b, _ := json.Marshal(pools)
		fmt.Println(string(b))
		<-ctx.Done()
		return nil
	default: // engine
		if _, err := warmAll(ctx, s); err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(engineLoop(ctx, s, sh, &requests, &watches))
	}
}

// serveSession serves s on socket as serve does, and answers SIGUSR1 with
// its CPU and API requests so far.
func serveSession(ctx context.Context, s *session.Session, socket string, requests *atomic.Int64) error {
	v := serve.NewService(s)
	access := serve.Access{Address: socket}
	l, _, err := serve.Listen(access)
	if err != nil {
		return err
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			_ = json.NewEncoder(os.Stdout).Encode(result{CPU: cpuSeconds(), Requests: requests.Load()})
		}
	}()
	fmt.Println("ready")
	return serve.Serve(ctx, l, v, access)
}

func warmAll(ctx context.Context, s *session.Session) ([]string, error) {
	var images []string
	for _, p := range s.Fleet().Plan().Pools {
		images = append(images, p.Image)
	}
	if _, err := s.Lookahead(nil, images); err != nil {
		return nil, err
	}
	ready, _, err := s.WaitPoolsReady(ctx, images, 10*time.Minute)
	if err == nil && !ready {
		err = fmt.Errorf("the pools did not become ready")
	}
	return images, err
}

// engineLoop is trainer.py's loop in Go, on the session in process.
func engineLoop(ctx context.Context, s *session.Session, sh shape, requests, watches *atomic.Int64) result {
	ts := sh.tasks()
	perStep := sh.Problems * sh.Group
	cpu, start := cpuSeconds(), time.Now()
	r0, w0 := requests.Load(), watches.Load()
	res := result{Latencies: make([]float64, len(ts)), Tasks: len(ts)}
	var n atomic.Int64
	for step := 0; step < len(ts); step += perStep {
		var wg sync.WaitGroup
		for i := step; i < step+perStep; i++ {
			wg.Go(func() {
				asked := time.Now()
				h, err := s.Acquire(ctx, session.AcquireRequest{RequestID: fmt.Sprint(n.Add(1)), ClientID: "go", TaskID: ts[i].ID})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				res.Latencies[i] = time.Since(asked).Seconds()
				if _, err := s.Release(ctx, h.Claim, "go", false); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			})
		}
		wg.Wait()
	}
	res.Wall, res.CPU = time.Since(start).Seconds(), cpuSeconds()-cpu
	res.Requests, res.Watches = requests.Load()-r0, watches.Load()-w0
	return res
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// counting counts the requests sent through it, watches apart.
type counting struct {
	next       http.RoundTripper
	n, watches *atomic.Int64
}

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Get("watch") == "true" {
		c.watches.Add(1)
	} else {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// report prints each client's medians over the rounds, and the ratios the
// targets are stated in: per round (the clients of a round ran back to
// back, so drift of the machine cancels) and their median.
func report(all map[string][]result) {
	type row struct{ p50, p99, rate, cpu, server, requests float64 }
	summary := func(r result) row {
		return row{stats.Percentile(r.Latencies, 0.50), stats.Percentile(r.Latencies, 0.99), float64(r.Tasks) / r.Wall, r.CPU, r.ServerCPU,
			float64(r.Requests+r.Watches) / float64(r.Tasks)}
	}
	fmt.Printf("\nmedians over the rounds\n%-13s %9s %9s %12s %12s %10s %14s\n", "client", "p50 ms", "p99 ms", "sandboxes/s", "trainer CPU", "serve CPU", "API req/task")
	for _, name := range clients {
		var p50, p99, rate, cpu, server, reqs []float64
		for _, r := range all[name] {
			x := summary(r)
			p50, p99, rate = append(p50, x.p50), append(p99, x.p99), append(rate, x.rate)
			cpu, server, reqs = append(cpu, x.cpu), append(server, x.server), append(reqs, x.requests)
		}
		fmt.Printf("%-13s %9.1f %9.1f %12.1f %12.2f %10.2f %14.2f\n", name, 1000*stats.Median(p50), 1000*stats.Median(p99),
			stats.Median(rate), stats.Median(cpu), stats.Median(server), stats.Median(reqs))
	}
	ratios := map[string][]float64{}
	names := []string{"serve/engine p99", "serve/bare sandboxes/s", "serve/bare p99", "serve/bare trainer CPU"}
	for i := range all["python-serve"] {
		s, e, b := summary(all["python-serve"][i]), summary(all["go-engine"][i]), summary(all["python-bare"][i])
		for j, v := range []float64{s.p99 / e.p99, s.rate / b.rate, s.p99 / b.p99, s.cpu / b.cpu} {
			ratios[names[j]] = append(ratios[names[j]], v)
		}
	}
	printPerRound("ratios per round, and their median (targets: serve/engine p99 ≤ 1.05; serve/bare sandboxes/s ≥ 1, p99 ≤ 1, trainer CPU ≤ 0.3)", names, ratios)
}

// printPerRound prints each named value's rounds and their median.
func printPerRound(title string, names []string, values map[string][]float64) {
	fmt.Println("\n" + title)
	for _, n := range names {
		var each []string
		for _, v := range values[n] {
			each = append(each, fmt.Sprintf("%.2f", v))
		}
		fmt.Printf("%-24s %s  median %.2f\n", n, strings.Join(each, " "), stats.Median(values[n]))
	}
}

// socketPath is a unix socket path for a serve, in a directory of its own
// that only this user can enter, as serve requires; cleanup removes it.
func socketPath(prefix string) (string, func(), error) {
	dir, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(dir, "serve.sock"), func() { os.RemoveAll(dir) }, nil
}
