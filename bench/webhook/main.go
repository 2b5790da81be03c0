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
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/benchcluster"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

func main() {
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

// poolTemplate is a run's template, as the plugin makes them: its run id
// is on it, so the webhook need not look it up on each Pod's owners.
func poolTemplate() *extensionsv1beta1.SandboxTemplate {
	tmpl := &extensionsv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "bench-pool", Labels: labels.ForRun("bench")}}
	tmpl.Spec.PodTemplate.Spec = corev1.PodSpec{SchedulerName: unscheduled,
		Containers: []corev1.Container{{Name: "sandbox", Image: "docker.io/swebench/sweb.eval.x86_64.bench:latest"}}}
	return tmpl
}

// fillPool creates tmpl and a SandboxWarmPool of n replicas of it in ns,
// as any client of Agent Sandbox would, and returns the seconds until the
// controller has created their n Pods; then it deletes them, and the Pods
// with deletePods.
func fillPool(ctx context.Context, kc kubernetes.Interface, c client.Client, ns string, tmpl *extensionsv1beta1.SandboxTemplate, n int) (float64, error) {
	tmpl.Namespace = ns
	replicas := int32(n)
	pool := &extensionsv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "bench-pool", Namespace: ns}}
	pool.Spec.Replicas = &replicas
	pool.Spec.TemplateRef.Name = tmpl.Name
	if err := c.Create(ctx, tmpl); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := c.Create(ctx, pool); err != nil {
		return 0, err
	}
	var secs float64
	for ctx.Err() == nil {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns), client.HasLabels{policy.SandboxPodLabel}); err != nil {
			return 0, err
		}
		if len(pods.Items) >= n {
			secs = time.Since(start).Seconds()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, obj := range []client.Object{pool, tmpl} {
		if err := client.IgnoreNotFound(c.Delete(ctx, obj, background)); err != nil {
			return 0, err
		}
	}
	return secs, deletePods(ctx, kc, c, ns)
}

// collectGarbage has the API server run a full garbage collection (its
// heap profile handler does, before it writes the profile), so that each
// trial starts from a collected heap: the API server collects every few
// seconds, and which trial a collection falls into would otherwise weigh
// more than the modes differ.
func collectGarbage(ctx context.Context, kc kubernetes.Interface) error {
	if _, err := kc.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx); err != nil {
		return fmt.Errorf("collecting the API server's garbage: %w", err)
	}
	return nil
}

// profileAPIServer writes 2 s of the API server's CPU profile to
// dir/name.pprof, for go tool pprof.
func profileAPIServer(ctx context.Context, kc kubernetes.Interface, dir, name string) error {
	b, err := kc.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "2").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("profiling the API server: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, strings.NewReplacer(" ", "-", ",", "", "+", "with").Replace(name)+".pprof"), b, 0o644)
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

// medianRatio is the median of the rounds' ratios of xs to ys.
func medianRatio(xs, ys []float64) float64 {
	ratios := make([]float64, len(xs))
	for i := range xs {
		ratios[i] = xs[i] / ys[i]
	}
	return stats.Percentile(ratios, 0.5)
}

// setPolicy creates or deletes the benchmark's policy for ns and waits
// until the webhook acts on the change: a dry-run sandbox Pod comes back
// from the mirror, or not.
func setPolicy(ctx context.Context, c client.Client, ns string, on bool) error {
	p := benchPolicy(ns)
	var err error
	if on {
		err = client.IgnoreAlreadyExists(c.Create(ctx, p))
	} else {
		err = client.IgnoreNotFound(c.Delete(ctx, p))
	}
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		pod := probePod(ns)
		if err := c.Create(ctx, pod, client.DryRunAll); err == nil && strings.HasPrefix(pod.Spec.Containers[0].Image, "mirror.example.com/") == on {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctx.Err()
}

// probePod is a sandbox Pod in ns to create as a dry run, to see what
// admission does to it.
func probePod(ns string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: "probe"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "busybox"}}}}
}

// benchPolicy is a policy as an admin would write it: a mirror, allowed
// registries, limit caps, colocation and the security defaults.
func benchPolicy(ns string) *v1alpha1.SandboxPolicy {
	return &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + ns}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		Images: &v1alpha1.ImagePolicy{
			Rewrite:           []v1alpha1.ImageRewrite{{From: "docker.io", To: "mirror.example.com/hub"}},
			AllowedRegistries: []string{"mirror.example.com"},
		},
		MaxLimits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
	}}
}

// floorConfiguration matches the sandbox Pods created in ns as the
// webhook's entries match those of a policy, but with a constant false
// condition: the API server prepares every Pod for CEL and never calls
// url.
func floorConfiguration(ns, url string) *admissionregistrationv1.MutatingWebhookConfiguration {
	ignore, none, never := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.NeverReinvocationPolicy
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "bench-webhook-floor-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "floor.bench.sandbox-fleet.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: policy.SandboxPodLabel, Operator: metav1.LabelSelectorOpExists}}},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "false"}},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			ReinvocationPolicy:      &never,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// waitForExclusion waits until the API server's entry name judges, and
// skips, a dry-run sandbox Pod in ns.
func waitForExclusion(ctx context.Context, kc kubernetes.Interface, ns, name string) error {
	for ctx.Err() == nil {
		families, err := apiServerMetrics(ctx, kc)
		if err != nil {
			return err
		}
		for _, m := range families["apiserver_admission_match_condition_exclusions_total"].GetMetric() {
			if label(m, "name") == name && m.GetCounter().GetValue() > 0 {
				return nil
			}
		}
		if _, err := kc.CoreV1().Pods(ns).Create(ctx, probePod(ns), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctx.Err()
}

// unscheduled is the scheduler the benchmark's Pods name, which does not
// run.
const unscheduled = "bench-webhook-unscheduled"

// podSpecs are the Pods each mode creates: a sandbox Pod as a template
// without policy makes it, and for compliant, as one the webhook mutated
// under the bench policy makes it. The Pods name a scheduler that does
// not run: what is measured is their creation, and the scheduler and
// kwok, which share the control plane's CPU, then have the same (no) work
// whatever the webhook did to them.
func podSpecs(ns string) (map[string]*corev1.Pod, error) {
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{policy.TemplateRefHashLabel: "bench"}},
		Spec: corev1.PodSpec{SchedulerName: unscheduled,
			Containers: []corev1.Container{{Name: "sandbox", Image: "docker.io/swebench/sweb.eval.x86_64.bench:latest"}}}}
	mutated := plain.DeepCopy()
	if _, err := policy.Mutate(mutated, policy.Set{*benchPolicy(ns)}, ""); err != nil {
		return nil, err
	}
	return map[string]*corev1.Pod{none: plain, bare: plain, policied: plain, noneCompliant: mutated, floor: mutated, compliant: mutated}, nil
}

// createPods creates n sandbox Pods like spec in ns with workers creators,
// at rate per second (0: as fast as they go), and returns each create's
// latency in seconds and the Pods created per second.
func createPods(ctx context.Context, kc kubernetes.Interface, ns string, spec *corev1.Pod, n, rate, workers int) ([]float64, float64, error) {
	jobs := make(chan int)
	var mu sync.Mutex
	var lat []float64
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				pod := spec.DeepCopy()
				pod.Name, pod.Namespace = fmt.Sprintf("pod-%d", i), ns
				pod.Labels[policy.SandboxPodLabel] = fmt.Sprintf("h%d", i)
				start := time.Now()
				_, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
				d := time.Since(start).Seconds()
				mu.Lock()
				lat = append(lat, d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	var tick <-chan time.Time
	if rate > 0 {
		ticker := time.NewTicker(time.Second / time.Duration(rate))
		defer ticker.Stop()
		tick = ticker.C
	}
	for i := range n {
		if tick != nil {
			<-tick
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return lat, float64(n) / time.Since(start).Seconds(), firstErr
}

// deletePods deletes the Pods in ns and waits until they are gone, so the
// next trial starts from an empty namespace.
func deletePods(ctx context.Context, kc kubernetes.Interface, c client.Client, ns string) error {
	zero := int64(0)
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(zero)); err != nil {
		return err
	}
	for ctx.Err() == nil {
		list, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ctx.Err()
}

// diff turns the observations between two readings of the histogram into
// values, each at the upper bound of its bucket: quantiles read from them
// are upper bounds at the buckets' resolution.
func diff(after, before *dto.Histogram) []float64 {
	if after == nil {
		return nil
	}
	prev := map[float64]uint64{}
	if before != nil {
		for _, b := range before.GetBucket() {
			prev[b.GetUpperBound()] = b.GetCumulativeCount()
		}
	}
	var out []float64
	below := uint64(0)
	for _, b := range after.GetBucket() {
		cum := b.GetCumulativeCount() - prev[b.GetUpperBound()]
		for range cum - below {
			out = append(out, b.GetUpperBound())
		}
		below = cum
	}
	return out
}

// counters are the cumulative figures a trial is measured by.
type counters struct {
	// decisions is the webhook's decision-time histogram for Pods.
	decisions *dto.Histogram
	// callSum and calls are the API server's total time in calls to the
	// sandbox Pod webhook and their number.
	callSum, calls float64
	// apiCPU and webhookCPU are the CPU seconds each process has used.
	apiCPU, webhookCPU float64
}

func readCounters(ctx context.Context, kc kubernetes.Interface, server *testwebhook.Server) (counters, error) {
	var c counters
	families, err := apiServerMetrics(ctx, kc)
	if err != nil {
		return c, err
	}
	for _, m := range families["apiserver_admission_webhook_admission_duration_seconds"].GetMetric() {
		// The entries the webhook writes per policy for sandbox Pods.
		if pod, _ := webhook.IsPodEntry(label(m, "name")); pod {
			c.callSum += m.GetHistogram().GetSampleSum()
			c.calls += float64(m.GetHistogram().GetSampleCount())
		}
	}
	c.apiCPU = families["process_cpu_seconds_total"].GetMetric()[0].GetCounter().GetValue()

	body, err := server.Metrics(ctx)
	if err != nil {
		return c, err
	}
	if families, err = parseMetrics([]byte(body)); err != nil {
		return c, fmt.Errorf("the webhook's metrics: %w", err)
	}
	for _, m := range families["asrl_webhook_admission_duration_seconds"].GetMetric() {
		if label(m, "kind") == "Pod" {
			c.decisions = m.GetHistogram()
		}
	}
	c.webhookCPU = families["process_cpu_seconds_total"].GetMetric()[0].GetCounter().GetValue()
	return c, nil
}

// apiServerMetrics reads the API server's metrics.
func apiServerMetrics(ctx context.Context, kc kubernetes.Interface) (map[string]*dto.MetricFamily, error) {
	b, err := kc.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	families, err := parseMetrics(b)
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	return families, nil
}

func parseMetrics(text []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, err
	}
	if len(families["process_cpu_seconds_total"].GetMetric()) == 0 {
		return nil, errors.New("no process_cpu_seconds_total")
	}
	return families, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
