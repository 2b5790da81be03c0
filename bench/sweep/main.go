// Command sweep simulates a pull-bound evaluation sweep on the local test
// cluster and measures what node-cache-aware placement saves: the sweep's
// wall time and the bytes its nodes pull, as ratios to the stock
// kube-scheduler's, in one run.
//
// The sweep runs -rollouts Pods of each of -repos × -instances
// SWE-bench-shaped images (a shared base, an environment per repository,
// each instance's own layer; images in task order, a task's rollouts
// together), at most as many at a time as the -nodes kwok nodes have
// -cpus slots. Each node starts with -warm images from an earlier sweep.
// This program plays each node's kubelet and node agent: when a Pod is
// bound it queues the layers the node lacks on the node's link at
// -bandwidth, kwok makes the Pod Ready when they are all there
// (testcluster.WithPullDelays), and then the node's NodeImageCache and its
// status.images (which the stock scheduler's ImageLocality reads) list the
// image. A Pod runs for -task once Ready and is then deleted.
//
// Placements, each over its own copy of the images (other names and
// digests, the same sizes, draws and order), so that one's pulls warm
// nothing for the next:
//
//   - the stock kube-scheduler;
//
//   - the stock kube-scheduler with the webhook's node-cache affinity
//     (a SandboxPolicy with nodeCache);
//
//   - asrl-scheduler in its shipped configuration (NodeCacheLocality).
//
// It prints each placement's wall time and bytes pulled as ratios to the
// stock scheduler's, and to the lower bounds no placement can beat
// (sweepBounds).
//
//	go run ./bench/sweep [-nodes 50] [-cpus 4] [-rollouts 4] [-bandwidth 256] [-task 10s]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/benchcluster"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/swebench"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testscheduler"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// params shape the cluster and the sweep.
type params struct {
	nodes, cpus, repos, instances, rollouts, warm int
	// bandwidth is each node's pull bandwidth in bytes a second.
	bandwidth float64
	task      time.Duration
}

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	var p params
	var mib float64
	flag.IntVar(&p.nodes, "nodes", 50, "kwok nodes")
	flag.IntVar(&p.cpus, "cpus", 4, "CPUs a node: each Pod takes one")
	flag.IntVar(&p.repos, "repos", 20, "repositories: images of one share an environment layer")
	flag.IntVar(&p.instances, "instances", 10, "images (task instances) per repository")
	flag.IntVar(&p.rollouts, "rollouts", 4, "Pods per image")
	flag.IntVar(&p.warm, "warm", 4, "images each node holds at the start")
	flag.Float64Var(&mib, "bandwidth", 256, "each node's pull bandwidth, MiB/s")
	flag.DurationVar(&p.task, "task", 10*time.Second, "how long a Pod runs once Ready")
	flag.Parse()
	p.bandwidth = mib * (1 << 20)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, p); err != nil {
		fmt.Fprintln(os.Stderr, "bench/sweep:", err)
		os.Exit(1)
	}
}

// placement is a way of choosing the sweep's nodes.
type placement struct {
	name, about, scheduler string
	// webhook adds the webhook's node-cache affinity to the Pods.
	webhook bool
}

var placements = []placement{
	{"stock", "kube-scheduler", corev1.DefaultSchedulerName, false},
	{"webhook", "kube-scheduler + webhook affinity", corev1.DefaultSchedulerName, true},
	{"asrl", "asrl-scheduler", testscheduler.SchedulerName, false},
}

func run(ctx context.Context, p params) error {
	var schedulerBin, webhookBin string
	capacity := corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(p.cpus), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}
	b, err := benchcluster.Start(ctx, "sweep", benchcluster.Options{
		Build: func(dir string) (err error) {
			if schedulerBin, err = testscheduler.Build(dir); err != nil {
				return err
			}
			webhookBin, err = testcluster.BuildCommand(dir, "asrl-webhook")
			return err
		},
		Cluster: []testcluster.Option{testcluster.WithNodes(testcluster.FakeNodes("node", p.nodes, capacity, nil)...), testcluster.WithPullDelays()},
	})
	if err != nil {
		return err
	}
	defer b.Stop()
	cluster, clients := b.Cluster, b.Clients
	sim := &simulator{clients: clients, bandwidth: p.bandwidth, nodes: map[string]*node{}}
	if err := sim.warm(ctx, p); err != nil {
		return err
	}
	if _, err := testscheduler.Start(ctx, cluster, schedulerBin, nil); err != nil {
		return err
	}

	// Tasks in an order of their own, each with its rollouts together.
	var order [][2]int
	for repo := range p.repos {
		for instance := range p.instances {
			order = append(order, [2]int{repo, instance})
		}
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	tasksOf := func(family string) []swebench.Image {
		var tasks []swebench.Image
		for _, o := range order {
			for range p.rollouts {
				tasks = append(tasks, swebench.Of(family, o[0], o[1]))
			}
		}
		return tasks
	}
	// The copies are alike: the bounds of the first are every one's.
	var held [][]swebench.Image
	for _, n := range sim.nodes {
		var own []swebench.Image
		for _, img := range n.held {
			if img.Family == placements[0].name {
				own = append(own, img)
			}
		}
		held = append(held, own)
	}
	least := sweepBounds(tasksOf(placements[0].name), held, p.cpus, p.task, p.bandwidth)
	results := map[string]result{}
	for _, pl := range placements {
		tasks := tasksOf(pl.name)
		r, err := sweep(ctx, cluster, sim, webhookBin, pl, tasks, p)
		if err != nil {
			return fmt.Errorf("%s: %w", pl.about, err)
		}
		fmt.Fprintf(os.Stderr, "%-34s %s\n", pl.about, r)
		results[pl.name] = r
	}
	report(p, least, results)
	return nil
}

// simulator is the kubelets and node agents of the kwok nodes, as far as
// images go.
type simulator struct {
	clients   *kube.Clients
	bandwidth float64
	nodes     map[string]*node
}

// node is a kwok node's images.
type node struct {
	// store is only used from the sweep's event loop.
	store *store
	// mu orders the writes of what the node holds.
	mu sync.Mutex
	// held is what its NodeImageCache, at resourceVersion, and its status
	// list.
	held            []swebench.Image
	resourceVersion string
}

// warm gives each node p.warm images of each placement's copy, the same
// draws for every copy, and lists them in its NodeImageCache and status.
func (s *simulator) warm(ctx context.Context, p params) error {
	rng := rand.New(rand.NewPCG(1, 2))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range p.nodes {
		name := fmt.Sprintf("node-%d", i)
		n := &node{}
		for range p.warm {
			repo, instance := rng.IntN(p.repos), rng.IntN(p.instances)
			for _, pl := range placements {
				n.held = append(n.held, swebench.Of(pl.name, repo, instance))
			}
		}
		var layers []v1alpha1.Layer
		for _, img := range n.held {
			layers = append(layers, img.Layers...)
		}
		n.store = newStore(layers)
		s.nodes[name] = n
		g.Go(func() error {
			cache := swebench.NodeCache(name, n.held)
			if err := s.clients.Client.Create(ctx, cache); err != nil {
				return err
			}
			n.resourceVersion = cache.ResourceVersion
			return s.writeStatus(ctx, name, n.held)
		})
	}
	return g.Wait()
}

// pull starts pulling img on nodeName at now and returns when the image is
// all there and the bytes pulled.
func (s *simulator) pull(now time.Time, nodeName string, img swebench.Image) (time.Time, int64) {
	return s.nodes[nodeName].store.pull(now, img.Layers, s.bandwidth)
}

// pulled lists img as held by nodeName, as its agent and kubelet would once
// the pull is done.
func (s *simulator) pulled(ctx context.Context, nodeName string, img swebench.Image) error {
	n := s.nodes[nodeName]
	n.mu.Lock()
	defer n.mu.Unlock()
	if slices.ContainsFunc(n.held, func(h swebench.Image) bool { return h.Name == img.Name }) {
		return nil
	}
	n.held = append(n.held, img)
	cache := swebench.NodeCache(nodeName, n.held)
	// The simulator is the object's only writer.
	cache.ResourceVersion = n.resourceVersion
	if err := s.clients.Client.Update(ctx, cache); err != nil {
		return err
	}
	n.resourceVersion = cache.ResourceVersion
	return s.writeStatus(ctx, nodeName, n.held)
}

// writeStatus sets the node's status.images to held, all of them (a
// kubelet with --node-status-max-images=-1).
func (s *simulator) writeStatus(ctx context.Context, nodeName string, held []swebench.Image) error {
	status := struct {
		Status struct {
			Images []corev1.ContainerImage `json:"images"`
		} `json:"status"`
	}{}
	for _, img := range held {
		status.Status.Images = append(status.Status.Images, corev1.ContainerImage{Names: []string{img.Name}, SizeBytes: nodecache.Size(img.Layers)})
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	return s.clients.Client.Status().Patch(ctx, node, mergePatch(status))
}

// result is what one placement's sweep measured.
type result struct {
	tasks int
	wall  time.Duration
	// pulled is the bytes the nodes pulled; cached the tasks that pulled
	// nothing.
	pulled int64
	cached int
	// waits are the tasks' times from bound to Ready.
	waits []time.Duration
}

func (r result) waitMean() time.Duration {
	var sum time.Duration
	for _, w := range r.waits {
		sum += w
	}
	return sum / time.Duration(len(r.waits))
}

func (r result) waitP95() time.Duration {
	w := slices.Sorted(slices.Values(r.waits))
	return w[len(w)*95/100]
}

func (r result) String() string {
	return fmt.Sprintf("%v wall, %.1f GiB pulled, %d of %d tasks pulled nothing, waits for pulls %v mean, %v p95",
		r.wall.Round(100*time.Millisecond), float64(r.pulled)/(1<<30), r.cached, r.tasks,
		r.waitMean().Round(10*time.Millisecond), r.waitP95().Round(10*time.Millisecond))
}

// sweep runs tasks under pl in a namespace of its own, at most as many at
// a time as the nodes have slots, and returns what it measured.
func sweep(ctx context.Context, cluster *testcluster.Cluster, sim *simulator, webhookBin string, pl placement, tasks []swebench.Image, p params) (_ result, err error) {
	ns := "sweep-" + pl.name
	c := sim.clients.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return result{}, err
	}
	if pl.webhook {
		stop, err := nodeCacheAffinity(ctx, cluster, c, ns, webhookBin, sim, pl.name)
		if err != nil {
			return result{}, err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	// The API server ends a watch now and then; the retry watcher resumes
	// it where it ended.
	pods := sim.clients.Kube.CoreV1().Pods(ns)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return result{}, err
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return pods.Watch(ctx, o) },
	})
	if err != nil {
		return result{}, err
	}
	defer w.Stop()

	g, ctx := errgroup.WithContext(ctx)
	// after runs f after d, in g, unless the sweep fails first.
	after := func(d time.Duration, f func() error) {
		g.Go(func() error {
			select {
			case <-time.After(d):
				return f()
			case <-ctx.Done():
				return nil
			}
		})
	}
	next := 0
	images := map[string]swebench.Image{}
	createNext := func() {
		i := next
		next++
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "task-" + strconv.Itoa(i)}, Spec: corev1.PodSpec{
			SchedulerName: pl.scheduler,
			Containers: []corev1.Container{{Name: "task", Image: tasks[i].Name,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
		}}
		if pl.webhook {
			pod.Labels = map[string]string{policy.SandboxPodLabel: pod.Name}
		}
		images[pod.Name] = tasks[i]
		g.Go(func() error { return c.Create(ctx, pod) })
	}
	r := result{tasks: len(tasks)}
	start := time.Now()
	for next < min(p.nodes*p.cpus, len(tasks)) {
		createNext()
	}
	bound, ready := map[string]time.Time{}, map[string]bool{}
	done := 0
	timeout := time.After(30 * time.Minute)
	for done < len(tasks) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return r, errors.New("the Pod watch ended")
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			switch {
			case !isPod:
				return r, fmt.Errorf("the Pod watch: %v", apierrors.FromObject(ev.Object))
			case ev.Type == watch.Deleted:
				done++
				if next < len(tasks) {
					createNext()
				}
			case pod.Spec.NodeName != "" && bound[pod.Name].IsZero():
				now := time.Now()
				bound[pod.Name] = now
				img := images[pod.Name]
				at, pulled := sim.pull(now, pod.Spec.NodeName, img)
				r.pulled += pulled
				if pulled == 0 {
					r.cached++
				}
				g.Go(func() error { return readyAt(ctx, c, pod, at) })
				after(at.Sub(now), func() error { return sim.pulled(ctx, pod.Spec.NodeName, img) })
			case isReady(pod) && !ready[pod.Name]:
				ready[pod.Name] = true
				r.waits = append(r.waits, time.Since(bound[pod.Name]))
				after(p.task, func() error { return c.Delete(ctx, pod, client.GracePeriodSeconds(0)) })
			}
		case <-ctx.Done():
			return r, g.Wait()
		case <-timeout:
			return r, fmt.Errorf("%d of %d tasks done after 30 minutes", done, len(tasks))
		}
	}
	r.wall = time.Since(start)
	return r, g.Wait()
}

// nodeCacheAffinity runs the webhook for ns with a SandboxPolicy asking for
// node-cache affinity, and waits until it adds some.
func nodeCacheAffinity(ctx context.Context, cluster *testcluster.Cluster, c client.Client, ns, bin string, sim *simulator, family string) (stop func() error, err error) {
	server, err := testwebhook.Start(ctx, cluster, ns, bin)
	if err != nil {
		return nil, err
	}
	policy := &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "node-cache-" + ns}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		NodeCache:         &v1alpha1.NodeCachePolicy{Weight: 100}}}
	stop = func() error {
		return errors.Join(c.Delete(context.Background(), policy), server.Close())
	}
	if err := c.Create(ctx, policy); err != nil {
		return nil, errors.Join(err, stop())
	}
	i := slices.IndexFunc(sim.nodes["node-0"].held, func(img swebench.Image) bool { return img.Family == family })
	if i < 0 {
		return nil, errors.Join(fmt.Errorf("node-0 holds no image of %s", family), stop())
	}
	if err := server.WaitForNodeAffinity(ctx, ns, sim.nodes["node-0"].held[i].Name); err != nil {
		return nil, errors.Join(err, stop())
	}
	return stop, nil
}

// readyAt has kwok make pod Ready at t.
func readyAt(ctx context.Context, c client.Client, pod *corev1.Pod, t time.Time) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		testcluster.ReadyAtAnnotation: t.UTC().Format(time.RFC3339Nano)}}}
	return c.Patch(ctx, pod, mergePatch(patch))
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// mergePatch is a JSON merge patch of v, a value of plain maps and
// structs that always encodes.
func mergePatch(v any) client.Patch {
	b, _ := json.Marshal(v)
	return client.RawPatch(types.MergePatchType, b)
}

// report prints each placement's sweep, as ratios to the stock
// kube-scheduler's and to the bounds no placement can beat.
func report(p params, least bounds, results map[string]result) {
	stock := results[placements[0].name]
	tasks := p.repos * p.instances * p.rollouts
	fmt.Printf("pull-bound sweep: %d tasks (%d images × %d rollouts) on %d kwok nodes × %d slots, %d warm images a node, %.0f MiB/s a node, %v a task\n",
		tasks, p.repos*p.instances, p.rollouts, p.nodes, p.cpus, p.warm, p.bandwidth/(1<<20), p.task)
	fmt.Printf("lower bounds: %.1fs wall (the tasks over the slots, each node's from its first pull on), %.0f GiB pulled (each layer no node holds, once)\n",
		least.wall.Seconds(), float64(least.pulled)/(1<<30))
	fmt.Printf("  %-34s %8s %8s %8s %10s %8s %10s %16s %14s\n", "placement", "wall", "× stock", "× bound", "pulled", "× stock", "no pull", "pull wait mean", "p95")
	for _, pl := range placements {
		r := results[pl.name]
		fmt.Printf("  %-34s %7.1fs %8.2f %8.2f %6.0f GiB %8.2f %9.0f%% %15.2fs %13.2fs\n", pl.about, r.wall.Seconds(), r.wall.Seconds()/stock.wall.Seconds(),
			r.wall.Seconds()/least.wall.Seconds(), float64(r.pulled)/(1<<30), float64(r.pulled)/float64(stock.pulled), 100*float64(r.cached)/float64(r.tasks),
			r.waitMean().Seconds(), r.waitP95().Seconds())
	}
}
