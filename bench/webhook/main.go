// Command webhook benchmarks asrl-webhook on the local test cluster (kwok
// nodes): sandbox Pods are created in six modes, rotating in one run —
// in a namespace no webhook sees; in one the webhook serves with no policy
// in force (its configuration then leaves the namespace out: the cost of
// having the webhook installed); there with a policy (a mirror, allowed
// registries, a limit cap) that patches every Pod, so every Pod is a
// call; there with the policy and Pods that already follow it, as a
// template the webhook mutated makes them (the API server's CEL condition
// lets them through uncalled); those compliant Pods where no webhook
// sees them, the baseline for the last two; and those Pods matched by a
// configuration whose condition is constant false, the API server's own
// cost of any in-process check — and it reports
//
//   - the webhook's own decision time per Pod (p50, p99), from its
//     asrl_webhook_admission_duration_seconds histogram, with Pods created
//     at -rate per second;
//   - the Pod create latency seen by the client at that rate, with and
//     without the webhook;
//   - Pod creates per second with -concurrency creators going flat out,
//     as a ratio to no webhook, and for the policy's Pods to the same Pods
//     with no webhook, also as the median of the rounds' ratios;
//   - the CPU the API server and the webhook spend per Pod.
//
// The webhook runs as the built binary. A real cluster keeps its control
// plane on nodes of its own and the webhook's replicas on workers; so,
// unless -split=false, the control plane runs on CPU 0 and this process
// (the creators) and the webhook on the other CPUs.
//
// Targets: decision p99 under 5 ms at 200 Pods/s, throughput ratio at
// least 0.9.
//
//	go run ./bench/webhook [-rounds 2] [-pods 1000] [-rate 200] [-concurrency 32] [-split=true]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/benchcluster"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	rounds := flag.Int("rounds", 2, "rounds of each measurement, with and without the webhook alternating")
	pods := flag.Int("pods", 1000, "Pods per trial")
	rate := flag.Int("rate", 200, "Pods per second in the latency trials")
	concurrency := flag.Int("concurrency", 32, "creators in the throughput trials")
	split := flag.Bool("split", true, "run the control plane on CPU 0, the creators and the webhook on the others")
	profile := flag.String("profile", "", "directory to write the API server's CPU profile of each flat-out trial to")
	poolSize := flag.Int("pool", 200, "replicas of the warm pool the Agent Sandbox controller fills with and without the webhook; 0 skips it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *rounds, *pods, *rate, *concurrency, *split, *profile, *poolSize); err != nil {
		fmt.Fprintln(os.Stderr, "bench/webhook:", err)
		os.Exit(1)
	}
}

// Modes a trial runs in.
const (
	none     = "no webhook"
	bare     = "webhook, no policy"
	policied = "webhook + policy"
	// compliant Pods are what a template the webhook mutated makes: the
	// policy is in force and they already follow it. noneCompliant are
	// the same Pods with no webhook: the baseline for a policy's Pods,
	// which carry more than plain ones whatever puts it there.
	compliant     = "policy, compliant"
	noneCompliant = "none, compliant"
	// floor are compliant Pods where a configuration of the benchmark's
	// own matches them with a constant false condition: the API server
	// converts each Pod for CEL and never calls, the floor of any
	// in-process check.
	floor = "constant condition"
)

// figures are a mode's measurements over the rounds.
type figures struct {
	p50, p99, podsPerSec []float64
	// decisions are the webhook's decision times; callSum and calls the
	// API server's total time in webhook calls and their number.
	decisions      []float64
	callSum, calls float64
	// apiCPUPerPod is the API server's CPU seconds per Pod in each
	// round; webhookCPU the webhook's over all created Pods.
	apiCPUPerPod        []float64
	webhookCPU, created float64
}

func run(ctx context.Context, rounds, pods, rate, concurrency int, split bool, profile string, poolSize int) error {
	var bin string
	opts := []testcluster.Option{testcluster.WithNodes(testcluster.FakeNodes("kwok-node", 4, testcluster.DefaultCapacity(), nil)...)}
	var workerCPUs []int
	if split {
		var err error
		if workerCPUs, err = keepOffCPU0(); err != nil {
			return err
		}
		opts = append(opts, testcluster.WithCPUs(0))
	}
	b, err := benchcluster.Start(ctx, "webhook", benchcluster.Options{
		Build:   func(dir string) (err error) { bin, err = testcluster.BuildCommand(dir, "asrl-webhook"); return err },
		Cluster: opts,
	})
	if err != nil {
		return err
	}
	defer b.Stop()
	cluster, clients := b.Cluster, b.Clients
	// One namespace no webhook sees, one the webhook serves, where the
	// policy is created for the policied trials and deleted for the bare.
	namespaces := map[string]string{}
	for _, mode := range []string{none, bare, floor} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-webhook-"}}
		if err := clients.Client.Create(ctx, ns); err != nil {
			return err
		}
		namespaces[mode] = ns.Name
	}
	namespaces[policied], namespaces[compliant] = namespaces[bare], namespaces[bare]
	namespaces[noneCompliant] = namespaces[none]
	server, err := testwebhook.Start(ctx, cluster, namespaces[bare], bin, workerCPUs...)
	if err != nil {
		return err
	}
	defer server.Close()
	floorConfig := floorConfiguration(namespaces[floor], server.URL+webhook.MutatePodsPath)
	if err := clients.Client.Create(ctx, floorConfig); err != nil {
		return err
	}

	cfg := rest.CopyConfig(cluster.RESTConfig())
	cfg.QPS, cfg.Burst = -1, 0
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := waitForExclusion(ctx, kc, namespaces[floor], floorConfig.Webhooks[0].Name); err != nil {
		return err
	}
	modes := []string{none, bare, policied, noneCompliant, floor, compliant}
	results := map[string]*figures{}
	for _, mode := range modes {
		results[mode] = &figures{}
	}
	specs, err := podSpecs(namespaces[bare])
	if err != nil {
		return err
	}
	fmt.Printf("%d rounds: %d Pods at %d/s, then %d Pods by %d creators, in each mode", rounds, pods, rate, pods, concurrency)
	if split {
		fmt.Printf("; control plane on CPU 0, creators and webhook on CPUs %v", workerCPUs)
	}
	fmt.Println()
	for round := range rounds {
		for k := range modes {
			mode := modes[(round+k)%len(modes)]
			on := mode == policied || mode == compliant
			if err := setPolicy(ctx, clients.Client, namespaces[bare], on); err != nil {
				return err
			}
			if err := server.WaitForPolicySet(ctx, namespaces[bare], on); err != nil {
				return err
			}
			f := results[mode]
			if err := collectGarbage(ctx, kc); err != nil {
				return err
			}
			before, err := readCounters(ctx, kc, server)
			if err != nil {
				return err
			}
			lat, _, err := createPods(ctx, kc, namespaces[mode], specs[mode], pods, rate, 64)
			if err != nil {
				return err
			}
			after, err := readCounters(ctx, kc, server)
			if err != nil {
				return err
			}
			f.decisions = append(f.decisions, diff(after.decisions, before.decisions)...)
			f.callSum, f.calls = f.callSum+after.callSum-before.callSum, f.calls+after.calls-before.calls
			if err := deletePods(ctx, kc, clients.Client, namespaces[mode]); err != nil {
				return err
			}
			if err := collectGarbage(ctx, kc); err != nil {
				return err
			}
			if before, err = readCounters(ctx, kc, server); err != nil {
				return err
			}
			profiled := make(chan error, 1)
			if profile != "" {
				go func() { profiled <- profileAPIServer(ctx, kc, profile, fmt.Sprintf("round%d-%s", round+1, mode)) }()
			} else {
				profiled <- nil
			}
			_, perSec, err := createPods(ctx, kc, namespaces[mode], specs[mode], pods, 0, concurrency)
			if err != nil {
				return err
			}
			if err := <-profiled; err != nil {
				return err
			}
			if after, err = readCounters(ctx, kc, server); err != nil {
				return err
			}
			if err := deletePods(ctx, kc, clients.Client, namespaces[mode]); err != nil {
				return err
			}
			// CPU per Pod in the flat-out trial, when the API server is
			// busiest.
			f.apiCPUPerPod = append(f.apiCPUPerPod, (after.apiCPU-before.apiCPU)/float64(pods))
			f.webhookCPU += after.webhookCPU - before.webhookCPU
			f.created += float64(pods)
			f.p50 = append(f.p50, stats.Percentile(lat, 0.5))
			f.p99 = append(f.p99, stats.Percentile(lat, 0.99))
			f.podsPerSec = append(f.podsPerSec, perSec)
			fmt.Printf("round %d %-18s create p50 %7.2f ms  p99 %7.2f ms   %6.1f Pods/s flat out\n", round+1, mode,
				stats.Percentile(lat, 0.5)*1e3, stats.Percentile(lat, 0.99)*1e3, perSec)
		}
	}
	fmt.Println()
	base := results[none]
	for _, mode := range modes {
		f := results[mode]
		fmt.Printf("%-18s create p50 %7.2f ms  p99 %7.2f ms   %6.1f Pods/s (%.2f of no webhook)   API server CPU %.2f ms/Pod (%.2fx)", mode,
			stats.Mean(f.p50)*1e3, stats.Mean(f.p99)*1e3, stats.Mean(f.podsPerSec), stats.Mean(f.podsPerSec)/stats.Mean(base.podsPerSec),
			stats.Mean(f.apiCPUPerPod)*1e3, stats.Mean(f.apiCPUPerPod)/stats.Mean(base.apiCPUPerPod))
		if f.calls > 0 {
			fmt.Printf("   webhook CPU %.3f ms/Pod, decision p50 %.2f ms p99 %.2f ms, call mean %.2f ms", f.webhookCPU/f.created*1e3,
				stats.Percentile(f.decisions, 0.5)*1e3, stats.Percentile(f.decisions, 0.99)*1e3, f.callSum/f.calls*1e3)
		}
		fmt.Println()
	}
	// The policy's Pods end up as the compliant ones: against those
	// without a webhook, what is left is the webhook's own cost. Rounds
	// drift on a shared machine; the median of each round's ratio, of
	// trials run one after the other, drifts least.
	same := results[noneCompliant]
	for _, mode := range []string{policied, floor, compliant} {
		f := results[mode]
		fmt.Printf("%-18s against %s: %.2f of its Pods/s (median of rounds %.2f), %.2fx its API server CPU per Pod (median %.2fx)\n", mode, noneCompliant,
			stats.Mean(f.podsPerSec)/stats.Mean(same.podsPerSec), medianRatio(f.podsPerSec, same.podsPerSec),
			stats.Mean(f.apiCPUPerPod)/stats.Mean(same.apiCPUPerPod), medianRatio(f.apiCPUPerPod, same.apiCPUPerPod))
	}
	fmt.Println("(decision quantiles are bucket upper bounds; targets: decision p99 < 5 ms at 200 Pods/s, creates/s ratio ≥ 0.9)")
	if poolSize == 0 {
		return nil
	}

	// The path sandbox Pods take: the Agent Sandbox controller fills a
	// warm pool from a run's template — as a client writes it, where no
	// webhook sees it; as the webhook would have mutated it, there too
	// (the baseline for a policy's Pods); and with the webhook and its
	// policy, which mutates the template so the API server skips the call
	// for its Pods. Rotating, as the trials above.
	fmt.Printf("\nwarm pool of %d replicas filled by the Agent Sandbox controller, %d rounds:\n", poolSize, rounds)
	plain := poolTemplate()
	compliantTmpl := plain.DeepCopy()
	if _, err := policy.MutateTemplate(&compliantTmpl.Spec.PodTemplate, policy.Set{*benchPolicy(namespaces[bare])}, plain.Name, plain.Labels[labels.RunID]); err != nil {
		return err
	}
	poolModes := []string{none, noneCompliant, policied}
	templates := map[string]*extensionsv1beta1.SandboxTemplate{none: plain, noneCompliant: compliantTmpl, policied: plain}
	fills := map[string][]float64{}
	for round := range rounds {
		for k := range poolModes {
			mode := poolModes[(round+k)%len(poolModes)]
			on := mode == policied
			if err := setPolicy(ctx, clients.Client, namespaces[bare], on); err != nil {
				return err
			}
			if err := server.WaitForPolicySet(ctx, namespaces[bare], on); err != nil {
				return err
			}
			if err := collectGarbage(ctx, kc); err != nil {
				return err
			}
			secs, err := fillPool(ctx, kc, clients.Client, namespaces[mode], templates[mode].DeepCopy(), poolSize)
			if err != nil {
				return err
			}
			fills[mode] = append(fills[mode], secs)
			fmt.Printf("round %d %-18s %6.2f s, %6.1f Pods/s\n", round+1, mode, secs, float64(poolSize)/secs)
		}
	}
	for _, mode := range poolModes[1:] {
		fmt.Printf("warm pool fill, %s: %.2f of the Pods/s of %s, %.2f of %s\n", mode,
			stats.Mean(fills[none])/stats.Mean(fills[mode]), none, stats.Mean(fills[noneCompliant])/stats.Mean(fills[mode]), noneCompliant)
	}
	return nil
}

// keepOffCPU0 moves this process's threads, and so the threads they start,
// to every CPU but 0, and returns those CPUs.
func keepOffCPU0() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	set.Clear(0)
	var cpus []int
	for cpu := range 1024 {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) == 0 {
		return nil, errors.New("-split needs at least two CPUs; use -split=false")
	}
	return cpus, testcluster.PinThisProcess(cpus...)
}
