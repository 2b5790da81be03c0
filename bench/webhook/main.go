// Command webhook benchmarks asrl-webhook on the local test cluster (kwok
// nodes): sandbox Pods are created in three modes, rotating in one run —
// in a namespace no webhook sees; in one the webhook serves with no policy
// in force, which is the cost of being called at all; and there with a
// policy (a mirror, allowed registries, a limit cap) — and it reports
//
//   - the webhook's own decision time per Pod (p50, p99), from its
//     asrl_webhook_admission_duration_seconds histogram, with Pods created
//     at -rate per second;
//   - the Pod create latency seen by the client at that rate, with and
//     without the webhook;
//   - Pod creates per second with -concurrency creators going flat out,
//     as a ratio to no webhook.
//
// Targets: decision p99 under 5 ms at 200 Pods/s, throughput ratio at
// least 0.9.
//
//	go run ./bench/webhook [-rounds 2] [-pods 1000] [-rate 200] [-concurrency 32]
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/webhook/policy"
)

func main() {
	rounds := flag.Int("rounds", 2, "rounds of each measurement, with and without the webhook alternating")
	pods := flag.Int("pods", 1000, "Pods per trial")
	rate := flag.Int("rate", 200, "Pods per second in the latency trials")
	concurrency := flag.Int("concurrency", 32, "creators in the throughput trials")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *rounds, *pods, *rate, *concurrency); err != nil {
		fmt.Fprintln(os.Stderr, "bench/webhook:", err)
		os.Exit(1)
	}
}

// Modes a trial runs in.
const (
	none     = "no webhook"
	bare     = "webhook, no policy"
	policied = "webhook + policy"
)

// figures are a mode's measurements over the rounds.
type figures struct {
	p50, p99, podsPerSec []float64
	// decisions are the webhook's decision times; callSum and calls the
	// API server's total time in webhook calls and their number.
	decisions      []float64
	callSum, calls float64
}

func run(ctx context.Context, rounds, pods, rate, concurrency int) error {
	cluster, err := testcluster.Start(ctx, testcluster.WithNodes(testcluster.FakeNodes("kwok-node", 4, testcluster.DefaultCapacity(), nil)...))
	if err != nil {
		return err
	}
	defer cluster.Stop(false)
	clients, err := cluster.Clients("")
	if err != nil {
		return err
	}
	// One namespace no webhook sees, one the webhook serves, where the
	// policy is created for the policied trials and deleted for the bare.
	namespaces := map[string]string{}
	for _, mode := range []string{none, bare} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-webhook-"}}
		if err := clients.Client.Create(ctx, ns); err != nil {
			return err
		}
		namespaces[mode] = ns.Name
	}
	namespaces[policied] = namespaces[bare]
	server, err := testwebhook.Start(ctx, cluster, namespaces[bare])
	if err != nil {
		return err
	}
	defer server.Close()

	cfg := rest.CopyConfig(cluster.RESTConfig())
	cfg.QPS, cfg.Burst = -1, 0
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	modes := []string{none, bare, policied}
	results := map[string]*figures{none: {}, bare: {}, policied: {}}
	fmt.Printf("%d rounds: %d Pods at %d/s, then %d Pods by %d creators, in each mode\n", rounds, pods, rate, pods, concurrency)
	for round := range rounds {
		for k := range modes {
			mode := modes[(round+k)%len(modes)]
			if err := setPolicy(ctx, clients.Client, namespaces[bare], mode == policied); err != nil {
				return err
			}
			f := results[mode]
			before := decisionHistogram()
			sum0, count0, err := webhookCalls(ctx, kc)
			if err != nil {
				return err
			}
			lat, _, err := createPods(ctx, kc, clients.Client, namespaces[mode], pods, rate, 64)
			if err != nil {
				return err
			}
			sum1, count1, err := webhookCalls(ctx, kc)
			if err != nil {
				return err
			}
			f.decisions = append(f.decisions, diff(decisionHistogram(), before)...)
			f.callSum, f.calls = f.callSum+sum1-sum0, f.calls+count1-count0
			_, perSec, err := createPods(ctx, kc, clients.Client, namespaces[mode], pods, 0, concurrency)
			if err != nil {
				return err
			}
			f.p50 = append(f.p50, quantile(lat, 0.5))
			f.p99 = append(f.p99, quantile(lat, 0.99))
			f.podsPerSec = append(f.podsPerSec, perSec)
			fmt.Printf("round %d %-18s create p50 %7.2f ms  p99 %7.2f ms   %6.1f Pods/s flat out\n", round+1, mode,
				quantile(lat, 0.5)*1e3, quantile(lat, 0.99)*1e3, perSec)
		}
	}
	fmt.Println()
	base := mean(results[none].podsPerSec)
	for _, mode := range modes {
		f := results[mode]
		fmt.Printf("%-18s create p50 %7.2f ms  p99 %7.2f ms   %6.1f Pods/s (%.2f of no webhook)", mode,
			mean(f.p50)*1e3, mean(f.p99)*1e3, mean(f.podsPerSec), mean(f.podsPerSec)/base)
		if f.calls > 0 {
			fmt.Printf("   decision p50 %.2f ms p99 %.2f ms, call mean %.2f ms", quantile(f.decisions, 0.5)*1e3,
				quantile(f.decisions, 0.99)*1e3, f.callSum/f.calls*1e3)
		}
		fmt.Println()
	}
	fmt.Println("(decision quantiles are bucket upper bounds; targets: decision p99 < 5 ms at 200 Pods/s, creates/s ratio ≥ 0.9)")
	return nil
}

func mean(xs []float64) float64 {
	total := 0.0
	for _, x := range xs {
		total += x
	}
	return total / float64(max(1, len(xs)))
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
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{webhook.SandboxPodLabel: "probe"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "busybox"}}}}
		if err := c.Create(ctx, pod, client.DryRunAll); err == nil && strings.HasPrefix(pod.Spec.Containers[0].Image, "mirror.example.com/") == on {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctx.Err()
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

// createPods creates n sandbox Pods in ns with workers creators, at rate
// per second (0: as fast as they go), returns each create's latency in
// seconds and the Pods created per second, and deletes them.
func createPods(ctx context.Context, kc kubernetes.Interface, c client.Client, ns string, n, rate, workers int) ([]float64, float64, error) {
	jobs := make(chan int)
	var mu sync.Mutex
	var lat []float64
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: ns,
					Labels: map[string]string{webhook.SandboxPodLabel: fmt.Sprintf("h%d", i), policy.TemplateRefHashLabel: "bench"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "docker.io/swebench/sweb.eval.x86_64.bench:latest"}}}}
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
	perSec := float64(n) / time.Since(start).Seconds()
	zero := int64(0)
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(zero)); err != nil && firstErr == nil {
		firstErr = err
	}
	// The next trial starts from an empty namespace.
	for {
		list, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return lat, perSec, firstErr
}

// decisionHistogram reads the webhook's decision-time histogram for Pods.
func decisionHistogram() *dto.Histogram {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil
	}
	for _, f := range families {
		if f.GetName() != "asrl_webhook_admission_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == "Pod" {
					return m.GetHistogram()
				}
			}
		}
	}
	return nil
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

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// webhookCalls reads the API server's total time in calls to the sandbox
// Pod webhook and their number.
func webhookCalls(ctx context.Context, kc kubernetes.Interface) (sum, count float64, err error) {
	body, err := kc.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `name="sandbox-pods.sandbox-fleet.io"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		switch {
		case strings.HasPrefix(line, "apiserver_admission_webhook_admission_duration_seconds_sum{"):
			sum += v
		case strings.HasPrefix(line, "apiserver_admission_webhook_admission_duration_seconds_count{"):
			count += v
		}
	}
	return sum, count, sc.Err()
}
