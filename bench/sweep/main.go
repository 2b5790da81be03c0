// Command sweep simulates a pull-bound evaluation sweep on the local test
// cluster, run by the fleet engine, and measures what node-cache-aware
// placement and planned pulls save: the sweep's wall time and the bytes
// its nodes pull, as ratios to the engine with the stock kube-scheduler
// and no plan, in one run.
//
// The sweep runs -rollouts tasks of each of -repos × -instances
// SWE-bench-shaped images (a shared base, an environment per repository,
// each instance's own layer; tasks in shuffled order, a task's rollouts
// together) through pkg/fleet — Open and Run, the pipelined strategy, as
// many tasks at once as the -nodes kwok nodes have -cpus slots, each task
// holding its sandbox for -task. Each node starts with -warm images from
// an earlier sweep. A registry on loopback serves the images' manifests
// (what the engine reads of images no node holds); this program plays
// each node's kubelet and node agent: when a sandbox Pod is bound it
// queues the layers the node lacks on the node's link at -bandwidth, kwok
// makes the Pod Ready when they are all there (testcluster.WithPullDelays),
// and then the node's NodeImageCache and its status.images (which the
// stock scheduler's ImageLocality reads) list the image; a PrepullJob has
// each node it selects queue its images' layers on the link, in order,
// and write its progress in the job's status as the agent does.
//
// Placements, each over its own copy of the images (other names and
// digests, the same sizes, draws and order), so that one's pulls warm
// nothing for the next, and each with a disk of -disk a node for its copy
// (the NodeImageCaches say what its copy takes of it):
//
//   - the stock kube-scheduler, no pull plan (plannedPulls: false): what a
//     user of the reference gets;
//
//   - the stock kube-scheduler with --prepull (fleet.WithPrepull): every
//     node's agent pulls every image of the sweep, up to its disk's
//     high-water mark (80% of -disk), before the first task;
//
//   - the stock kube-scheduler with the webhook's node-cache affinity
//     (a SandboxPolicy with nodeCache), no pull plan;
//
//   - asrl-scheduler in its shipped configuration (NodeCacheLocality), no
//     pull plan;
//
//   - the stock kube-scheduler with planned pulls (plannedPulls: true).
//
// It prints each placement's wall time and bytes pulled as ratios to the
// first's, and to the lower bounds no placement can beat (sweepBounds).
//
// With -remove-node D (and one placement) node-0 is deleted D into the
// sweep, its kubelet and agent with it; with -stop-agent D node-0's agent
// stops D into the sweep (its PrepullJobs' pulls not begun are dropped,
// it writes no more progress), and -agent-silence sets how long the
// engine waits to take it for stopped (config.Fleet.AgentSilence).
//
//	go run ./bench/sweep [-nodes 50] [-cpus 4] [-rollouts 4] [-bandwidth 256] [-task 10s] [-placements stock,planned] [-remove-node 30s] [-stop-agent 5s -agent-silence 15s]
package main

import (
	"cmp"
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
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
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
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// params shape the cluster and the sweep.
type params struct {
	nodes, cpus, repos, instances, rollouts, warm int
	// placements are the ones to run; the ratios are to the first.
	placements []placement
	// bandwidth is each node's pull bandwidth in bytes a second.
	bandwidth float64
	task      time.Duration
	// removeNode, when set, is how long into the sweep node-0 is deleted,
	// its kubelet and agent with it; stopAgent, node-0's agent stopped.
	removeNode, stopAgent time.Duration
	// agentSilence is the engine's config.Fleet.AgentSilence (0: its
	// default).
	agentSilence time.Duration
	// disk is each node's image filesystem, in bytes, for each placement.
	disk int64
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
	disk := flag.Int64("disk", 100, "each node's image filesystem for each placement, GiB")
	flag.DurationVar(&p.task, "task", 10*time.Second, "how long a Pod runs once Ready")
	only := flag.String("placements", "", "the placements to run, comma-separated (default all); the ratios are to the first")
	flag.DurationVar(&p.removeNode, "remove-node", 0, "delete node-0 this long into the sweep (with one placement: the next would have a node less)")
	flag.DurationVar(&p.stopAgent, "stop-agent", 0, "stop node-0's agent this long into the sweep (with one placement)")
	flag.DurationVar(&p.agentSilence, "agent-silence", 0, "how long the engine waits for a silent agent before taking it for stopped (default the engine's)")
	flag.Parse()
	p.bandwidth = mib * (1 << 20)
	p.disk = *disk << 30
	var err error
	if p.placements, err = choose(*only); err != nil {
		fmt.Fprintln(os.Stderr, "bench/sweep: -placements:", err)
		os.Exit(2)
	}
	if (p.removeNode > 0 || p.stopAgent > 0) && len(p.placements) != 1 {
		fmt.Fprintln(os.Stderr, "bench/sweep: -remove-node and -stop-agent take one placement (-placements planned, say): the ones after it would run on a node less, or without its agent")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err = run(ctx, p); err != nil {
		fmt.Fprintln(os.Stderr, "bench/sweep:", err)
		os.Exit(1)
	}
}

// placement is a way of choosing the sweep's nodes.
type placement struct {
	name, about, scheduler string
	// webhook adds the webhook's node-cache affinity to the Pods.
	webhook bool
	// planned has the engine plan the pulls (config.Fleet.PlannedPulls).
	planned bool
	// prepull has the engine pre-pull every image (fleet.WithPrepull).
	prepull bool
}

// choose picks the placements named in list, in its order; all when it
// is empty.
func choose(list string) ([]placement, error) {
	if list == "" {
		return placements, nil
	}
	var out []placement
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(placements, func(pl placement) bool { return pl.name == name })
		if i < 0 {
			return nil, fmt.Errorf("no placement %q: choose among stock, prepull, webhook, asrl and planned", name)
		}
		out = append(out, placements[i])
	}
	return out, nil
}

var placements = []placement{
	{name: "stock", about: "kube-scheduler", scheduler: corev1.DefaultSchedulerName},
	{name: "prepull", about: "kube-scheduler + --prepull", scheduler: corev1.DefaultSchedulerName, prepull: true},
	{name: "webhook", about: "kube-scheduler + webhook affinity", scheduler: corev1.DefaultSchedulerName, webhook: true},
	{name: "asrl", about: "asrl-scheduler", scheduler: testscheduler.SchedulerName},
	{name: "planned", about: "kube-scheduler + planned pulls", scheduler: corev1.DefaultSchedulerName, planned: true},
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
	// The images' registry serves their manifests, for the engine's pull
	// plan to read the layers of images no node holds.
	registry, err := swebench.StartManifests()
	if err != nil {
		return err
	}
	defer registry.Stop()
	for _, pl := range p.placements {
		for repo := range p.repos {
			for instance := range p.instances {
				if err := registry.Add(swebench.In(registry.Host, pl.name, repo, instance)); err != nil {
					return err
				}
			}
		}
	}
	sim := &simulator{clients: clients, bandwidth: p.bandwidth, disk: p.disk, nodes: map[string]*node{}, registry: registry.Host, family: p.placements[0].name}
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
				tasks = append(tasks, swebench.In(sim.registry, family, o[0], o[1]))
			}
		}
		return tasks
	}
	// The copies are alike: the bounds of the first are every one's.
	var held [][]swebench.Image
	for _, n := range sim.nodes {
		var own []swebench.Image
		for _, img := range n.held {
			if img.Family == p.placements[0].name {
				own = append(own, img)
			}
		}
		held = append(held, own)
	}
	least := sweepBounds(tasksOf(p.placements[0].name), held, p.cpus, p.task, p.bandwidth)
	results := map[string]result{}
	for _, pl := range p.placements {
		tasks := tasksOf(pl.name)
		r, err := sweep(ctx, b, sim, webhookBin, pl, tasks, p)
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
	// disk is a node's image filesystem for each placement's copy.
	disk  int64
	nodes map[string]*node
	// family is the placement whose sweep runs, whose copy's share of
	// the disk the NodeImageCaches tell; set between sweeps only.
	family string
	// registry is the images' registry host.
	registry string
}

// node is a kwok node's images.
type node struct {
	// mu guards the store and agentStopped, and orders the writes of what
	// the node holds.
	mu    sync.Mutex
	store *store
	// held is what its NodeImageCache, at resourceVersion, and its status
	// list.
	held            []swebench.Image
	resourceVersion string
	// used is, by family, the bytes of its layers on the node or coming.
	used map[string]int64
	// agentStopped is set once its agent stopped: it pulls and writes no
	// more; the kubelet goes on.
	agentStopped bool
}

// warm gives each node p.warm images of each placement's copy, the same
// draws for every copy, and lists them in its NodeImageCache and status.
func (s *simulator) warm(ctx context.Context, p params) error {
	rng := rand.New(rand.NewPCG(1, 2))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range p.nodes {
		name := fmt.Sprintf("node-%d", i)
		n := &node{used: map[string]int64{}}
		for range p.warm {
			repo, instance := rng.IntN(p.repos), rng.IntN(p.instances)
			for _, pl := range p.placements {
				n.held = append(n.held, swebench.In(s.registry, pl.name, repo, instance))
			}
		}
		var layers []v1alpha1.Layer
		for _, img := range n.held {
			layers = append(layers, img.Layers...)
		}
		n.store = newStore(layers)
		for _, l := range n.store.layers() {
			n.used[familyOf(n.held, l)] += l.Size
		}
		s.nodes[name] = n
		g.Go(func() error {
			cache := s.cache(name, n)
			if err := s.clients.Client.Create(ctx, cache); err != nil {
				return err
			}
			n.resourceVersion = cache.ResourceVersion
			return s.writeStatus(ctx, name, n.held)
		})
	}
	return g.Wait()
}

// familyOf is the family of the image of held that has layer l.
func familyOf(held []swebench.Image, l v1alpha1.Layer) string {
	for _, img := range held {
		if slices.Contains(img.Layers, l) {
			return img.Family
		}
	}
	return ""
}

// cache is n's NodeImageCache: what it holds, and its image filesystem as
// the sweep's placement has it. Callers hold n.mu, or own n.
func (s *simulator) cache(nodeName string, n *node) *v1alpha1.NodeImageCache {
	c := swebench.NodeCache(nodeName, n.held)
	used := n.used[s.family]
	c.ImageFilesystem = v1alpha1.ImageFilesystem{UsedBytes: used, CapacityBytes: s.disk, AvailableBytes: max(s.disk-used, 0)}
	return c
}

// runs has the NodeImageCaches tell family's share of the nodes' disks,
// for its sweep.
func (s *simulator) runs(ctx context.Context, family string) error {
	s.family = family
	for name, n := range s.nodes {
		if err := s.updateCache(ctx, name, n); err != nil {
			return err
		}
	}
	return nil
}

// updateCache writes n's NodeImageCache; callers hold n.mu, or own n.
func (s *simulator) updateCache(ctx context.Context, nodeName string, n *node) error {
	cache := s.cache(nodeName, n)
	// The simulator is the object's only writer.
	cache.ResourceVersion = n.resourceVersion
	if err := s.clients.Client.Update(ctx, cache); err != nil {
		return err
	}
	n.resourceVersion = cache.ResourceVersion
	return nil
}

// pull starts pulling img on nodeName at now — for a Pod, by the kubelet,
// or for a PrepullJob, by the agent — and returns when the image is all
// there and the bytes pulled.
func (s *simulator) pull(now time.Time, nodeName string, img swebench.Image, forPod bool) (time.Time, int64) {
	n := s.nodes[nodeName]
	n.mu.Lock()
	defer n.mu.Unlock()
	at, pulled := n.store.pull(now, img.Layers, s.bandwidth, forPod)
	n.used[img.Family] += pulled
	return at, pulled
}

// fits reports whether nodeName's agent starts a pull of img under a
// disk high-water mark of highWater percent: not once its placement's
// share of the disk is that full.
func (s *simulator) fits(nodeName string, img swebench.Image, highWater int32) bool {
	n := s.nodes[nodeName]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.used[img.Family] < s.disk/100*int64(highWater)
}

// stopAgent stops nodeName's agent at now: the pulls of its jobs not begun
// are dropped, and their bytes returned.
func (s *simulator) stopAgent(now time.Time, nodeName string) int64 {
	n := s.nodes[nodeName]
	n.mu.Lock()
	defer n.mu.Unlock()
	n.agentStopped = true
	dropped := n.store.cancel(now, s.bandwidth)
	n.used[s.family] -= dropped
	return dropped
}

// agentRuns reports whether nodeName's agent runs.
func (s *simulator) agentRuns(nodeName string) bool {
	n := s.nodes[nodeName]
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.agentStopped
}

// pulled lists img as held by nodeName, as its agent and kubelet would once
// the pull is done: the kubelet in the node's status, the agent, unless
// stopped, in its NodeImageCache. A pull the agent's stop dropped lists
// nothing.
func (s *simulator) pulled(ctx context.Context, nodeName string, img swebench.Image) error {
	n := s.nodes[nodeName]
	n.mu.Lock()
	defer n.mu.Unlock()
	if slices.ContainsFunc(n.held, func(h swebench.Image) bool { return h.Name == img.Name }) || !n.store.has(img.Layers, time.Now()) {
		return nil
	}
	n.held = append(n.held, img)
	if n.agentStopped {
		return s.writeStatus(ctx, nodeName, n.held)
	}
	if err := s.updateCache(ctx, nodeName, n); err != nil {
		return err
	}
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
	pulls pulls
	// waits are the tasks' waits for their sandbox (the engine's claim
	// phase): a pull the task waits for is in it, one a warm pool made
	// beforehand is not.
	waits []time.Duration
}

func (r result) waitMean() time.Duration {
	var sum time.Duration
	for _, w := range r.waits {
		sum += w
	}
	return sum / time.Duration(max(1, len(r.waits)))
}

func (r result) waitP95() time.Duration {
	if len(r.waits) == 0 {
		return 0
	}
	w := slices.Sorted(slices.Values(r.waits))
	return w[len(w)*95/100]
}

func (r result) String() string {
	return fmt.Sprintf("%v wall, %.1f GiB pulled, %d of %d sandboxes pulled nothing, tasks waited for a sandbox %v mean, %v p95",
		r.wall.Round(100*time.Millisecond), float64(r.pulls.bytes)/(1<<30), r.pulls.cached, r.pulls.sandboxes,
		r.waitMean().Round(10*time.Millisecond), r.waitP95().Round(10*time.Millisecond))
}

// pulls are what the nodes pulled: the bytes, for the sweep's sandboxes
// and PrepullJobs; the sandboxes, and those that pulled nothing.
type pulls struct {
	bytes     int64
	sandboxes int
	cached    int
}

// sweep runs tasks through the fleet engine under pl in a namespace of
// its own — the pipelined strategy, as many tasks at once as the nodes
// have slots, each holding its sandbox for p.task — while the simulator
// pulls for each sandbox Pod bound to a node, and returns what it
// measured. Every task must succeed and nothing of the run be left.
func sweep(ctx context.Context, b *benchcluster.Bench, sim *simulator, webhookBin string, pl placement, images []swebench.Image, p params) (r result, err error) {
	ns := "sweep-" + pl.name
	c := sim.clients.Client
	if err := sim.runs(ctx, pl.name); err != nil {
		return result{}, err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return result{}, err
	}
	if pl.webhook {
		stop, err := nodeCacheAffinity(ctx, b.Cluster, c, ns, webhookBin, sim, pl.name)
		if err != nil {
			return result{}, err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	clients, err := kube.ForConfig(b.Cluster.RESTConfig(), ns)
	if err != nil {
		return result{}, err
	}
	// Without the nodes played no sandbox gets Ready: their failure ends
	// the run.
	ctx, cancel := context.WithCancelCause(ctx)
	var counted pulls
	played := make(chan error, 1)
	stops := make(chan string, 1)
	go func() {
		err := sim.playNodes(ctx, ns, images, &counted, stops)
		cancel(fmt.Errorf("playing the nodes: %w", err))
		played <- err
	}()
	defer func() {
		cancel(nil)
		if perr := <-played; !errors.Is(perr, context.Canceled) {
			err = errors.Join(err, perr)
		}
		r.pulls = counted
	}()

	cfg := config.Default()
	cfg.Strategy = "pipelined"
	cfg.MaxConcurrent = p.nodes * p.cpus
	cfg.ReadyTimeout.Duration = 30 * time.Minute
	cfg.Template.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	cfg.Template.ExtraPodSpec = &corev1.PodSpec{SchedulerName: pl.scheduler}
	cfg.PlannedPulls = &pl.planned
	cfg.AgentSilence.Duration = p.agentSilence
	var ts []tasks.Task
	for i, img := range images {
		ts = append(ts, tasks.Task{ID: "task-" + strconv.Itoa(i), Image: img.Name})
	}
	targets := []fleet.Target{{Config: config.Cluster{Name: "sweep", Weight: 1}, Clients: clients}}
	var opts []fleet.Option
	if pl.prepull {
		opts = append(opts, fleet.WithPrepull(nodecache.DefaultHighWaterPercent))
	}
	f, err := fleet.Open(ctx, "sweep-"+pl.name, cfg, ts, targets, opts...)
	if err != nil {
		return r, err
	}
	defer f.Close()
	var failed []string
	hold := func(ctx context.Context, _ tasks.Task, _ *fleet.Sandbox) (fleet.Output, error) {
		select {
		case <-time.After(p.task):
			return fleet.Output{}, nil
		case <-ctx.Done():
			return fleet.Output{}, ctx.Err()
		}
	}
	start := time.Now()
	if p.removeNode > 0 {
		removed := time.AfterFunc(p.removeNode, func() {
			fmt.Fprintf(os.Stderr, "deleting node-0 %v into the sweep\n", p.removeNode)
			if err := sim.clients.Kube.CoreV1().Nodes().Delete(ctx, "node-0", metav1.DeleteOptions{}); err != nil {
				cancel(fmt.Errorf("deleting node-0: %w", err))
			}
		})
		defer removed.Stop()
	}
	if p.stopAgent > 0 {
		stopped := time.AfterFunc(p.stopAgent, func() {
			fmt.Fprintf(os.Stderr, "stopping node-0's agent %v into the sweep\n", p.stopAgent)
			stops <- "node-0"
		})
		defer stopped.Stop()
	}
	_, err = f.Run(ctx, fleet.RunOptions{Work: hold, OnResult: func(res fleet.Result) {
		if !res.OK {
			failed = append(failed, res.ID+": "+res.Error)
			return
		}
		r.waits = append(r.waits, time.Duration(res.Phases["claim"]*float64(time.Second)))
	}})
	r.wall, r.tasks = time.Since(start), len(ts)
	if err != nil {
		return r, err
	}
	if len(failed) > 0 {
		return r, fmt.Errorf("%d of %d tasks failed, first %s", len(failed), len(ts), failed[0])
	}
	return r, benchcluster.NothingLeft(ctx, c, ns)
}

// playNodes plays the kubelets and agents of the nodes for ns until ctx
// ends: a Pod bound to a node pulls what the node lacks of its image, and
// kwok makes it Ready when that is there; a PrepullJob has each node it
// selects pull its images, in order. A node lists an image once it is
// all there. It counts the pulls in counted.
func (s *simulator) playNodes(ctx context.Context, ns string, images []swebench.Image, counted *pulls, stops <-chan string) error {
	pods := s.clients.Kube.CoreV1().Pods(ns)
	podEvents, err := retryWatch(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return pods.Watch(ctx, o) })
	if err != nil {
		return err
	}
	defer podEvents.Stop()
	c := s.clients.Client
	jobEvents, err := retryWatch(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		list := &v1alpha1.PrepullJobList{}
		return list, c.List(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &o})
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return c.Watch(ctx, &v1alpha1.PrepullJobList{}, client.InNamespace(ns), &client.ListOptions{Raw: &o})
	})
	if err != nil {
		return err
	}
	defer jobEvents.Stop()
	g, ctx := errgroup.WithContext(ctx)
	byName := map[string]swebench.Image{}
	for _, img := range images {
		byName[img.Name] = img
	}
	// pull has nodeName pull img from now on, for a Pod or a job, and list
	// it when it is there; it returns when that is, and whether the node
	// held it.
	pull := func(now time.Time, nodeName string, img swebench.Image, forPod bool) (time.Time, bool) {
		at, pulled := s.pull(now, nodeName, img, forPod)
		counted.bytes += pulled
		g.Go(func() error {
			select {
			case <-time.After(at.Sub(now)):
				return s.pulled(ctx, nodeName, img)
			case <-ctx.Done():
				return nil
			}
		})
		return at, pulled == 0 && !at.After(now)
	}
	bound, jobs := map[string]bool{}, map[string]bool{}
	for {
		select {
		case ev, ok := <-podEvents.ResultChan():
			if !ok {
				return errors.Join(errors.New("the Pod watch ended"), g.Wait())
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			switch {
			case !isPod:
				return errors.Join(fmt.Errorf("the Pod watch: %v", apierrors.FromObject(ev.Object)), g.Wait())
			case ev.Type == watch.Deleted || pod.Spec.NodeName == "" || bound[pod.Name]:
				continue
			}
			bound[pod.Name] = true
			img, ok := byName[pod.Spec.Containers[0].Image]
			if !ok {
				return errors.Join(fmt.Errorf("pod %s runs %s, not an image of the sweep", pod.Name, pod.Spec.Containers[0].Image), g.Wait())
			}
			before := counted.bytes
			at, _ := pull(time.Now(), pod.Spec.NodeName, img, true)
			counted.sandboxes++
			if counted.bytes == before {
				counted.cached++
			}
			g.Go(func() error { return readyAt(ctx, c, pod, at) })
		case ev, ok := <-jobEvents.ResultChan():
			if !ok {
				return errors.Join(errors.New("the PrepullJob watch ended"), g.Wait())
			}
			job, isJob := ev.Object.(*v1alpha1.PrepullJob)
			switch {
			case !isJob:
				return errors.Join(fmt.Errorf("the PrepullJob watch: %v", apierrors.FromObject(ev.Object)), g.Wait())
			case ev.Type != watch.Added || jobs[job.Name]:
				continue
			}
			jobs[job.Name] = true
			now := time.Now()
			for name := range s.nodes {
				if !labels.SelectorFromSet(job.Spec.NodeSelector).Matches(labels.Set{corev1.LabelHostname: name}) || !s.agentRuns(name) {
					continue
				}
				var arrivals []time.Time
				present := 0
				highWater := cmp.Or(job.Spec.DiskHighWaterPercent, nodecache.DefaultHighWaterPercent)
				for _, ref := range job.Spec.Images {
					img, ok := byName[ref]
					if !ok {
						return errors.Join(fmt.Errorf("PrepullJob %s pulls %s, not an image of the sweep", job.Name, ref), g.Wait())
					}
					if !s.fits(name, img, highWater) {
						break
					}
					at, held := pull(now, name, img, false)
					arrivals = append(arrivals, at)
					if held {
						present++
					}
				}
				// Each report writes the server's answer into its job.
				g.Go(func() error { return s.report(ctx, job.DeepCopy(), name, arrivals, present) })
			}
		case name := <-stops:
			counted.bytes -= s.stopAgent(time.Now(), name)
		case <-ctx.Done():
			// A pull's failure ended ctx: it is the error.
			if err := g.Wait(); err != nil {
				return err
			}
			return ctx.Err()
		}
	}
}

// report writes nodeName's progress on job as its agent does: at once,
// then as its images are there (at most every 2 s) and at least every
// v1alpha1.PrepullHeartbeat while it pulls, until they all are or the
// agent stopped; by server-side apply under a field manager of the
// node's, so that the nodes a job selects write their entries side by
// side. arrivals are when each image pulled is there (the first of the
// job's images: the disk's high-water mark stopped the rest), present how
// many the node held. The job pulls one image at a time: done is the
// first images that are there.
func (s *simulator) report(ctx context.Context, job *v1alpha1.PrepullJob, nodeName string, arrivals []time.Time, present int) error {
	for {
		now := time.Now()
		done := slices.IndexFunc(arrivals, func(at time.Time) bool { return at.After(now) })
		if done < 0 {
			done = len(arrivals)
		}
		entry := v1alpha1.NodePrepullStatus{Node: nodeName, Phase: v1alpha1.PrepullPulling, Pulled: int32(max(done-present, 0)), Present: int32(min(present, done)),
			Pending: int32(len(job.Spec.Images) - done), UpdateTime: metav1.NewTime(now)}
		switch {
		case done < len(arrivals):
		case len(arrivals) < len(job.Spec.Images):
			entry.Phase, entry.Message = v1alpha1.PrepullStopped, "the image filesystem reached the disk high-water mark"
		default:
			entry.Phase = v1alpha1.PrepullSucceeded
		}
		if !s.agentRuns(nodeName) {
			return nil
		}
		patch, err := json.Marshal(map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "PrepullJob",
			"metadata": map[string]string{"name": job.Name, "namespace": job.Namespace},
			"status":   map[string]any{"nodes": []v1alpha1.NodePrepullStatus{entry}}})
		if err != nil {
			return err
		}
		err = s.clients.Client.Status().Patch(ctx, job, client.RawPatch(types.ApplyPatchType, patch),
			client.FieldOwner("sweep-agent-"+nodeName), client.ForceOwnership)
		switch {
		case ctx.Err() != nil, apierrors.IsNotFound(err):
			// The run deletes its jobs as it ends.
			return nil
		case err != nil:
			// As the agent does, write again at the next turn: a busy API
			// server times some writes out.
		case entry.Phase != v1alpha1.PrepullPulling:
			return nil
		}
		wait := v1alpha1.PrepullHeartbeat
		switch {
		case err != nil:
			wait = 2 * time.Second
		case done < len(arrivals):
			wait = min(max(arrivals[done].Sub(now), 2*time.Second), wait)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
	}
}

// retryWatch lists and watches with list and watch: the API server ends a
// watch now and then, and the retry watcher resumes it where it ended.
func retryWatch(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error)) (*watchtools.RetryWatcher, error) {
	obj, err := list(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	rv, err := apimeta.NewAccessor().ResourceVersion(obj)
	if err != nil {
		return nil, err
	}
	return watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: watchFunc})
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

// readyAt has kwok make pod Ready at t. A Pod gone meanwhile (a pool's
// refill scaled away, a window let go) needs nothing.
func readyAt(ctx context.Context, c client.Client, pod *corev1.Pod, t time.Time) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		testcluster.ReadyAtAnnotation: t.UTC().Format(time.RFC3339Nano)}}}
	return client.IgnoreNotFound(c.Patch(ctx, pod, mergePatch(patch)))
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
	stock := results[p.placements[0].name]
	tasks := p.repos * p.instances * p.rollouts
	fmt.Printf("pull-bound sweep: %d tasks (%d images × %d rollouts) on %d kwok nodes × %d slots, %d warm images a node, %.0f MiB/s a node, %v a task\n",
		tasks, p.repos*p.instances, p.rollouts, p.nodes, p.cpus, p.warm, p.bandwidth/(1<<20), p.task)
	fmt.Printf("lower bounds: %.1fs wall (the tasks over the slots, each node's from its first pull on), %.0f GiB pulled (each layer no node holds, once)\n",
		least.wall.Seconds(), float64(least.pulled)/(1<<30))
	fmt.Printf("  %-34s %8s %8s %8s %10s %8s %10s %16s %14s\n", "placement", "wall", "× stock", "× bound", "pulled", "× stock", "no pull", "pull wait mean", "p95")
	for _, pl := range p.placements {
		r := results[pl.name]
		fmt.Printf("  %-34s %7.1fs %8.2f %8.2f %6.0f GiB %8.2f %9.0f%% %15.2fs %13.2fs\n", pl.about, r.wall.Seconds(), r.wall.Seconds()/stock.wall.Seconds(),
			r.wall.Seconds()/least.wall.Seconds(), float64(r.pulls.bytes)/(1<<30), float64(r.pulls.bytes)/float64(stock.pulls.bytes), 100*float64(r.pulls.cached)/float64(r.pulls.sandboxes),
			r.waitMean().Seconds(), r.waitP95().Seconds())
	}
}
