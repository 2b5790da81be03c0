// Command scheduler benchmarks asrl-scheduler's NodeCacheLocality on the
// local test cluster with -nodes kwok nodes (1,000), each with a
// NodeImageCache holding -images-per-node SWE-bench-shaped images (a
// shared base, one environment layer per repository, each instance's own
// layer) out of -repos × -instances. The built scheduler runs three
// profiles, rotating in one run over the same Pods (images drawn the same
// way for each):
//
//   - node-cache: the shipped profile (default plugins plus
//     NodeCacheLocality, every feasible node scored);
//   - default, all nodes: the default plugins, every feasible node scored
//     — the baseline for the plugin's own cost;
//   - default: the default plugins as kube-scheduler ships them (it scores
//     the first 42% of 1,000 nodes it finds feasible) — the baseline for
//     the shipped profile as a whole.
//
// It reports per profile the scheduling algorithm's time per Pod (from
// the scheduler's scheduler_scheduling_algorithm_duration_seconds) and
// the Pods it could schedule a second at that pace, as a ratio to each
// baseline; the Pods bound per second end to end (creates, scheduling,
// binds, on this machine's shared API server); and the share of Pods
// placed on a cache-optimal node: one lacking the fewest bytes of the
// Pod's image of all nodes (every node has room for every Pod here).
//
// The control plane and this process run on CPU 0 and the scheduler on
// CPU 1, as a cluster keeps them apart; each round starts with another
// profile. Targets: Pods a second at least 0.9 of the
// default profile's, 95% placed cache-optimally.
//
//	go run ./bench/scheduler [-nodes 1000] [-pods 500] [-rounds 3] [-profile DIR]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/benchcluster"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/swebench"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testscheduler"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// params shape the cluster and the images.
type params struct {
	nodes, imagesPerNode, repos, instances, pods, rounds, concurrency int
	// profile is a directory for the scheduler's CPU profile of each
	// profile's first trial.
	profile string
}

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	var p params
	flag.IntVar(&p.nodes, "nodes", 1000, "kwok nodes")
	flag.IntVar(&p.imagesPerNode, "images-per-node", 20, "images in each node's cache")
	flag.IntVar(&p.repos, "repos", 50, "repositories: images of one share an environment layer")
	flag.IntVar(&p.instances, "instances", 20, "images (task instances) per repository")
	flag.IntVar(&p.pods, "pods", 500, "Pods per trial")
	flag.IntVar(&p.rounds, "rounds", 3, "rounds of the three profiles")
	flag.IntVar(&p.concurrency, "concurrency", 16, "Pod creators")
	flag.StringVar(&p.profile, "profile", "", "directory to write the scheduler's CPU profile of each profile's first trial to")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, p); err != nil {
		fmt.Fprintln(os.Stderr, "bench/scheduler:", err)
		os.Exit(1)
	}
}

// family names the benchmark's images.
const family = "swebench"

// The profiles, in the order each round runs them.
var profiles = []struct{ name, about string }{
	{testscheduler.SchedulerName, "node-cache (shipped)"},
	{"default-all-nodes", "default, all nodes"},
	{"default", "default"},
}

func run(ctx context.Context, p params) error {
	var bin string
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	// This process (the creators, the watch) stays on CPU 0 with the
	// control plane: CPU 1 is the scheduler's alone.
	b, err := benchcluster.Start(ctx, "scheduler", benchcluster.Options{
		Build:   func(dir string) (err error) { bin, err = testscheduler.Build(dir); return err },
		Pin:     true,
		Cluster: []testcluster.Option{testcluster.WithNodes(testcluster.FakeNodes("node", p.nodes, capacity, nil)...)},
		QPS:     2000, Burst: 4000,
	})
	if err != nil {
		return err
	}
	defer b.Stop()
	cluster, clients := b.Cluster, b.Clients

	// Each node holds images of a few repositories; the index is what
	// the placements are judged by.
	index := nodecache.NewIndex()
	rng := rand.New(rand.NewPCG(1, 2))
	caches := make(chan *v1alpha1.NodeImageCache)
	creates, createCtx := errgroup.WithContext(ctx)
	for range p.concurrency {
		creates.Go(func() error {
			for c := range caches {
				if err := clients.Client.Create(createCtx, c); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for i := range p.nodes {
		var held []swebench.Image
		for range p.imagesPerNode {
			held = append(held, swebench.Of(family, rng.IntN(p.repos), rng.IntN(p.instances)))
		}
		c := swebench.NodeCache(fmt.Sprintf("node-%d", i), held)
		n, err := nodecache.NewNode(c)
		if err != nil {
			return err
		}
		index.Set(n)
		select {
		case caches <- c:
		case <-createCtx.Done():
		}
	}
	close(caches)
	if err := creates.Wait(); err != nil {
		return fmt.Errorf("creating the NodeImageCaches: %w", err)
	}

	sched, err := testscheduler.Start(ctx, cluster, bin, func(c *configv1.KubeSchedulerConfiguration) {
		// Binding must not be held to the default 50 requests a second:
		// the scheduler's choices are what is measured.
		c.ClientConnection.QPS, c.ClientConnection.Burst = 5000, 5000
		c.Profiles = append(c.Profiles,
			configv1.KubeSchedulerProfile{SchedulerName: ptr.To(profiles[1].name), PercentageOfNodesToScore: ptr.To[int32](100)},
			configv1.KubeSchedulerProfile{SchedulerName: ptr.To(profiles[2].name)})
	}, 1)
	if err != nil {
		return err
	}
	metrics, err := metricsClient(cluster.RESTConfig())
	if err != nil {
		return err
	}

	results := map[string][]trial{}
	for round := range p.rounds {
		// Each round starts with another profile, so none always runs
		// first (or last) in a round.
		for i := range profiles {
			prof := profiles[(round+i)%len(profiles)]
			// Each profile gets the same Pods in a round.
			draw := rand.New(rand.NewPCG(uint64(round), 7))
			before, err := algorithmSeconds(ctx, metrics, sched.URL)
			if err != nil {
				return err
			}
			var profiled chan error
			if p.profile != "" && round == 0 {
				profiled = make(chan error, 1)
				go func() {
					profiled <- cpuProfile(ctx, metrics, sched.URL, filepath.Join(p.profile, prof.name+".pprof"))
				}()
			}
			r, err := runTrial(ctx, clients, prof.name, fmt.Sprintf("r%d-%s", round, prof.name), p, draw, index)
			if err != nil {
				return err
			}
			if profiled != nil {
				if err := <-profiled; err != nil {
					return err
				}
			}
			after, err := algorithmSeconds(ctx, metrics, sched.URL)
			if err != nil {
				return err
			}
			r.algorithm = after - before
			results[prof.name] = append(results[prof.name], r)
			fmt.Fprintf(os.Stderr, "round %d %-22s %6.1f Pods/s bound, algorithm %.2f ms a Pod, %.1f%% cache-optimal\n", round, prof.about,
				r.boundPerSecond(), r.algorithm.Seconds()*1000/float64(r.pods), 100*r.optimalShare())
		}
	}
	report(p, results)
	return nil
}

// trial is what one profile's batch of Pods measured.
type trial struct {
	pods, optimal int
	wall          time.Duration
	algorithm     time.Duration
}

func (t trial) boundPerSecond() float64 { return float64(t.pods) / t.wall.Seconds() }
func (t trial) optimalShare() float64   { return float64(t.optimal) / float64(t.pods) }

// algorithmRate is the Pods a second the scheduling algorithm's pace
// allows.
func (t trial) algorithmRate() float64 { return float64(t.pods) / t.algorithm.Seconds() }

// runTrial creates p.pods Pods for scheduler in a namespace of its own,
// their images drawn by draw, and waits for them all to be bound.
func runTrial(ctx context.Context, clients *kube.Clients, scheduler, name string, p params, draw *rand.Rand, index *nodecache.Index) (trial, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := clients.Client.Create(ctx, ns); err != nil {
		return trial{}, err
	}
	w, err := clients.Kube.CoreV1().Pods(name).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return trial{}, err
	}
	defer w.Stop()
	pods := make([]*corev1.Pod, p.pods)
	for i := range pods {
		img := swebench.Of(family, draw.IntN(p.repos), draw.IntN(p.instances)).Name
		pods[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: fmt.Sprintf("pod-%d", i)}, Spec: corev1.PodSpec{
			SchedulerName: scheduler,
			Containers: []corev1.Container{{Name: "task", Image: img,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}},
		}}
	}
	start := time.Now()
	work := make(chan *corev1.Pod)
	creates, createCtx := errgroup.WithContext(ctx)
	for range p.concurrency {
		creates.Go(func() error {
			for pod := range work {
				if err := clients.Client.Create(createCtx, pod); err != nil {
					return err
				}
			}
			return nil
		})
	}
	go func() {
		defer close(work)
		for _, pod := range pods {
			select {
			case work <- pod:
			case <-createCtx.Done():
				return
			}
		}
	}()

	images := map[string]string{}
	for _, pod := range pods {
		images[pod.Name] = pod.Spec.Containers[0].Image
	}
	t := trial{pods: p.pods}
	bound := map[string]bool{}
	failed := createCtx.Done()
	timeout := time.After(10 * time.Minute)
	for len(bound) < p.pods {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return t, errors.New("the Pod watch ended")
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted || pod.Spec.NodeName == "" || bound[pod.Name] {
				continue
			}
			bound[pod.Name] = true
			if optimal(index, images[pod.Name], pod.Spec.NodeName) {
				t.optimal++
			}
		case <-failed:
			if err := creates.Wait(); err != nil {
				return t, fmt.Errorf("creating %s's Pods: %w", name, err)
			}
			failed = nil
		case <-timeout:
			return t, fmt.Errorf("%s: %d of %d Pods bound after 10 minutes", name, len(bound), p.pods)
		}
	}
	t.wall = time.Since(start)
	return t, creates.Wait()
}

// optimal reports whether node lacks the fewest bytes of img of all
// nodes.
func optimal(index *nodecache.Index, img, node string) bool {
	layers := index.PodLayers([]string{img}, nil)
	if len(layers) == 0 {
		// No node has any of it: every node is as good.
		return true
	}
	missing := index.Lacking(layers)
	return index.MissingOn(layers, []string{node})[0] == slices.Min(slices.Collect(maps.Values(missing)))
}

// report prints the medians over the rounds, as ratios to the baselines.
func report(p params, results map[string][]trial) {
	median := func(name string, f func(trial) float64) float64 {
		var xs []float64
		for _, t := range results[name] {
			xs = append(xs, f(t))
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	rate := func(name string) float64 { return median(name, trial.algorithmRate) }
	bound := func(name string) float64 { return median(name, trial.boundPerSecond) }
	fmt.Printf("asrl-scheduler, %d kwok nodes, %d images a node of %d, %d Pods a trial, median of %d rounds\n",
		p.nodes, p.imagesPerNode, p.repos*p.instances, p.pods, p.rounds)
	fmt.Printf("  %-22s %-36s %-36s %s\n", "", "scheduling algorithm", "bound end to end", "")
	fmt.Printf("  %-22s %8s %7s %8s %10s %7s %8s %10s %14s\n", "profile", "ms/Pod", "Pods/s", "× all", "× default", "Pods/s", "× all", "× default", "cache-optimal")
	for _, prof := range profiles {
		r, b := rate(prof.name), bound(prof.name)
		fmt.Printf("  %-22s %8.2f %7.0f %8.2f %10.2f %7.1f %8.2f %10.2f %13.1f%%\n", prof.about, 1000/r, r,
			r/rate(profiles[1].name), r/rate(profiles[2].name), b, b/bound(profiles[1].name), b/bound(profiles[2].name),
			100*median(prof.name, trial.optimalShare))
	}
}

// metricsClient reads the scheduler's /metrics with the cluster's admin
// credentials; its serving certificate is self-signed.
func metricsClient(cfg *rest.Config) (*http.Client, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	tlsConfig = tlsConfig.Clone()
	tlsConfig.RootCAs, tlsConfig.InsecureSkipVerify = nil, true
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}, nil
}

// cpuProfile writes the scheduler's CPU profile of the next 3 seconds to
// path.
func cpuProfile(ctx context.Context, c *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/debug/pprof/profile?seconds=3", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: c.Transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the scheduler's CPU profile: %s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// algorithmSeconds is the scheduler's total scheduling algorithm time so
// far.
func algorithmSeconds(ctx context.Context, c *http.Client, url string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("the scheduler's /metrics: %s %v", resp.Status, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, m := range families["scheduler_scheduling_algorithm_duration_seconds"].GetMetric() {
		sum += m.GetHistogram().GetSampleSum()
	}
	return time.Duration(sum * float64(time.Second)), nil
}
