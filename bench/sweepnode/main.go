// Command sweepnode runs a pull-bound evaluation sweep through the fleet
// engine on the local cluster's real node — containerd, runc and a kubelet
// on this machine, with the components installed from the shipped
// manifests as docs/admin.md has an admin do (testinstall.OnRealNode:
// asrl-prepull-agent as its DaemonSet, with its ServiceAccount, against
// the node's containerd) — with and without planned pulls (config.Fleet's
// PlannedPulls), in alternating order, in one run.
//
// The sweep is SWE-bench-shaped: -repos repositories, each an environment
// layer (-env MiB) of its own, and -instances instance images per
// repository, each a layer of its own (-layer MiB) on top, all on the
// busybox base the node already holds; -rollouts tasks of each image, in
// shuffled order; each task runs `sleep` for -task in its sandbox. The node
// has -slots slots (the sandboxes' CPU request is its allocatable CPU over
// -slots) and pulls over one link of -bandwidth MiB/s (the loopback
// registry's shared link, testcluster.WithRegistryLink). Every placement
// and round has images of its own, so each starts with none of them on the
// node.
//
// Without a plan the pipelined strategy creates the next window's pools
// while this window runs, but their Pods cannot land on the full node, so
// their pulls start only when this window's sandboxes go; with a plan the
// node's agent pulls the next images while the tasks run. It reports, per
// round and placement, the wall time, the time to the first task, each
// task's wait for its sandbox (claim), the images the agent pulled ahead,
// and the two lower bounds: the work over the slots plus the first pull,
// and all the sweep's bytes over the link plus one task.
//
//	go run ./bench/sweepnode [-rounds 2] [-repos 4] [-instances 3] [-rollouts 2] [-slots 4] [-task 10s] [-env 32] [-layer 8] [-bandwidth 4]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	mathrand "math/rand"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/benchcluster"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/internal/nodecache/agent"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testinstall"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// params are the sweep's shape, the node's and the link's.
type params struct {
	rounds, repos, instances, rollouts, slots int
	task                                      time.Duration
	envMiB, layerMiB, bandwidthMiB            int
}

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	var p params
	flag.IntVar(&p.rounds, "rounds", 2, "rounds; each runs the sweep without and with planned pulls, in alternating order")
	flag.IntVar(&p.repos, "repos", 4, "repositories, each with an environment layer of its own")
	flag.IntVar(&p.instances, "instances", 3, "instance images per repository")
	flag.IntVar(&p.rollouts, "rollouts", 2, "tasks per image")
	flag.IntVar(&p.slots, "slots", 4, "sandboxes the node runs at once")
	flag.DurationVar(&p.task, "task", 10*time.Second, "how long each task runs in its sandbox")
	flag.IntVar(&p.envMiB, "env", 32, "MiB of each repository's environment layer")
	flag.IntVar(&p.layerMiB, "layer", 8, "MiB of each instance's own layer")
	flag.IntVar(&p.bandwidthMiB, "bandwidth", 4, "MiB/s of the node's link to the registry")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, p); err != nil {
		fmt.Fprintln(os.Stderr, "bench/sweepnode:", err)
		os.Exit(1)
	}
}

// placements are the two ways the sweep runs, by whether it plans pulls.
var placements = []bool{false, true}

func placementName(planned bool) string {
	if planned {
		return "planned"
	}
	return "unplanned"
}

func run(ctx context.Context, p params) (err error) {
	b, err := benchcluster.Start(ctx, "sweepnode", benchcluster.Options{
		Cluster: []testcluster.Option{testcluster.WithRealNode(), testcluster.WithNetworkPolicies(), testcluster.WithNodes(),
			testcluster.WithRegistryLink(p.bandwidthMiB << 20)},
	})
	if err != nil {
		return err
	}
	defer b.Stop()
	cluster, c := b.Cluster, b.Clients.Client
	nodeName, registry := cluster.RealNodeName(), cluster.RegistryAddr()
	bin, err := testcluster.BinDir()
	if err != nil {
		return err
	}
	overlay := filepath.Join(b.Dir, "install")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return err
	}
	installed, err := testinstall.OnRealNode(ctx, cluster, filepath.Join(bin, "kubectl"), overlay, registry)
	if installed != nil {
		defer func() { err = errors.Join(err, installed.Uninstall(context.Background())) }()
	}
	if err != nil {
		return fmt.Errorf("installing the components: %w", err)
	}

	free, err := freeCPU(ctx, c, nodeName)
	if err != nil {
		return err
	}
	request := free / int64(p.slots)
	if request < 10 {
		return fmt.Errorf("-slots %d: the node's %dm of CPU its Pods leave hold no more than %d sandboxes of 10m", p.slots, free, free/10)
	}
	// The first sandbox pulls the pause image and the busybox base, which
	// every node of a sweep holds, before anything is measured.
	if _, err := sweep(ctx, b, p, request, false, []string{testimages.Busybox}); err != nil {
		return fmt.Errorf("the warm-up sandbox: %w", err)
	}
	// Every sweep's layers stay in the registry; the node holds one
	// sweep's at a time, packed and unpacked, and a margin for
	// containerd's collection of the last one.
	need := int64(p.rounds*len(placements)+3) * sweepBytes(p)
	if err := checkRoom(ctx, c, nodeName, need); err != nil {
		return err
	}

	least := bounds(p)
	fmt.Printf("real node: %d repositories × %d instances × %d rollouts = %d tasks of %v, %d slots (%dm CPU each), env %d MiB, instance %d MiB, link %d MiB/s\n",
		p.repos, p.instances, p.rollouts, p.repos*p.instances*p.rollouts, p.task, p.slots, request, p.envMiB, p.layerMiB, p.bandwidthMiB)
	fmt.Printf("lower bounds: work over the slots + the first pull %.1f s; all the bytes over the link + one task %.1f s\n",
		least.work.Seconds(), least.link.Seconds())
	results := map[bool][]result{}
	for round := range p.rounds {
		for i := range placements {
			planned := placements[(round+i)%len(placements)]
			images, err := pushSweep(ctx, registry, p, round, planned)
			if err != nil {
				return err
			}
			r, err := sweep(ctx, b, p, request, planned, images)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, placementName(planned), err)
			}
			if err := removeImages(ctx, cluster, images); err != nil {
				return err
			}
			fmt.Printf("round %d %-9s %s\n", round+1, placementName(planned), r)
			results[planned] = append(results[planned], r)
		}
	}
	report(least, results)
	return nil
}

// freeCPU is the node's allocatable CPU, in millicores, less what the
// Pods on it (the installed components') request.
func freeCPU(ctx context.Context, c client.Client, nodeName string) (int64, error) {
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
		return 0, err
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods); err != nil {
		return 0, err
	}
	free := node.Status.Allocatable.Cpu().MilliValue()
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != nodeName || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ctr := range pod.Spec.Containers {
			free -= ctr.Resources.Requests.Cpu().MilliValue()
		}
	}
	return free, nil
}

// checkRoom fails unless the node's agent says its image filesystem has
// need bytes below the high-water mark the run's pulls stop at: a sweep
// that runs out of room measures the disk, not the pulls.
func checkRoom(ctx context.Context, c client.Client, nodeName string, need int64) error {
	nic := &v1alpha1.NodeImageCache{}
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Get(ctx, client.ObjectKey{Name: nodeName}, nic)
		if err == nil && nic.ImageFilesystem.CapacityBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no NodeImageCache with the image filesystem's size for %s a minute after its agent started (%v)", nodeName, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if room := nodecache.Room(nic.ImageFilesystem, nodecache.DefaultHighWaterPercent); room < need {
		return fmt.Errorf("the node's image filesystem has %d MiB below the high-water mark of %d%%, the sweeps need about %d MiB (all their layers in the registry, one sweep's on the node, packed and unpacked): free some disk or make the sweep smaller",
			room>>20, nodecache.DefaultHighWaterPercent, need>>20)
	}
	return nil
}

// removeImages removes images from the real node's runtime, so that the
// node's disk holds one sweep's images at a time.
func removeImages(ctx context.Context, cluster *testcluster.Cluster, images []string) error {
	rt, err := agent.Dial("unix://" + cluster.CRISocket())
	if err != nil {
		return err
	}
	defer rt.Close()
	for _, img := range images {
		if err := rt.Remove(ctx, img); err != nil {
			return fmt.Errorf("removing %s from the node: %w", img, err)
		}
	}
	return nil
}

// result is one sweep.
type result struct {
	wall, first time.Duration
	// busy is the share of the slots' time, over the wall, that ran tasks.
	busy float64
	// ahead is the most images the node's agent had pulled for the run.
	ahead int32
}

func (r result) String() string {
	return fmt.Sprintf("wall %6.1f s  first task %5.1f s  slots busy %3.0f%%  agent pulled %d images",
		r.wall.Seconds(), r.first.Seconds(), 100*r.busy, r.ahead)
}

// sweep runs rollouts tasks of each of images, shuffled, in a namespace
// of its own, each running `sleep` for the task's time in its sandbox,
// and checks nothing is left.
func sweep(ctx context.Context, b *benchcluster.Bench, p params, cpuMilli int64, planned bool, images []string) (r result, err error) {
	ns, err := testcluster.CreateNamespace(ctx, b.Clients.Kube, "sweep-"+placementName(planned)+"-")
	if err != nil {
		return r, err
	}
	clients, err := b.Cluster.Clients(ns)
	if err != nil {
		return r, err
	}
	cfg := config.Default()
	cfg.Strategy = "pipelined"
	cfg.MaxConcurrent = p.slots
	cfg.ReadyTimeout.Duration = 10 * time.Minute
	cfg.Template.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("64Mi")}
	cfg.PlannedPulls = &planned
	var ts []tasks.Task
	for i, img := range images {
		for k := range p.rollouts {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("image-%d-%d", i, k), Image: img})
		}
	}
	rng := rand.New(rand.NewPCG(uint64(len(images)), 1))
	rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	f, err := fleet.Open(ctx, "bench-sweepnode", cfg, ts, []fleet.Target{{Config: config.Cluster{Name: "node", Weight: 1}, Clients: clients}})
	if err != nil {
		return r, err
	}
	defer f.Close()

	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan int32, 1)
	go func() { watched <- agentPulled(watchCtx, clients.Client, ns) }()
	defer func() {
		stopWatch()
		r.ahead = <-watched
	}()

	work := fleet.ExecWork([]string{"sleep", strconv.FormatFloat(p.task.Seconds(), 'f', -1, 64)}, nil)
	start := time.Now()
	var firstOnce sync.Once
	var mu sync.Mutex
	var failed []string
	_, err = f.Run(ctx, fleet.RunOptions{
		Work: func(ctx context.Context, t tasks.Task, s *fleet.Sandbox) (fleet.Output, error) {
			firstOnce.Do(func() { r.first = time.Since(start) })
			return work(ctx, t, s)
		},
		OnResult: func(res fleet.Result) {
			mu.Lock()
			defer mu.Unlock()
			if !res.OK {
				failed = append(failed, res.ID+": "+res.Error)
			}
		}})
	r.wall = time.Since(start)
	r.busy = float64(len(ts)) * p.task.Seconds() / (float64(p.slots) * r.wall.Seconds())
	if err != nil {
		return r, err
	}
	if len(failed) > 0 {
		return r, fmt.Errorf("%d of %d tasks failed, first %s", len(failed), len(ts), failed[0])
	}
	return r, benchcluster.NothingLeft(ctx, clients.Client, ns)
}

// agentPulled watches the run's PrepullJobs in ns until ctx ends and
// returns the most images their nodes' entries said were pulled.
func agentPulled(ctx context.Context, c client.Client, ns string) int32 {
	var most int32
	for {
		jobs := &v1alpha1.PrepullJobList{}
		if err := c.List(ctx, jobs, client.InNamespace(ns)); err == nil {
			for _, j := range jobs.Items {
				for _, n := range j.Status.Nodes {
					most = max(most, n.Pulled)
				}
			}
		}
		select {
		case <-ctx.Done():
			return most
		case <-time.After(time.Second):
		}
	}
}

// pushSweep builds the sweep's images for round and placement — an
// environment layer per repository and a layer per instance on the
// busybox base, random so that no two rounds or placements share any —
// pushes them to the registry's shared link, and returns their names.
// After its sweep they are removed from the node (removeImages).
func pushSweep(ctx context.Context, registry string, p params, round int, planned bool) ([]string, error) {
	baseRef, err := name.ParseReference(registry + "/library/busybox:1.36")
	if err != nil {
		return nil, err
	}
	base, err := remote.Image(baseRef, remote.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("reading the busybox base from the registry: %w", err)
	}
	seed := uint64(round)<<1 | map[bool]uint64{false: 0, true: 1}[planned]
	var images []string
	for repo := range p.repos {
		env, err := randomLayer(p.envMiB, seed, uint64(repo), 0)
		if err != nil {
			return nil, err
		}
		for inst := range p.instances {
			own, err := randomLayer(p.layerMiB, seed, uint64(repo), uint64(inst)+1)
			if err != nil {
				return nil, err
			}
			img, err := mutate.AppendLayers(base, env, own)
			if err != nil {
				return nil, err
			}
			ref := fmt.Sprintf("%s/sandbox-fleet/link/sweep-%d-%s/repo-%d-instance-%d:latest", registry, round, placementName(planned), repo, inst)
			if err := push(ctx, ref, img); err != nil {
				return nil, err
			}
			images = append(images, ref)
		}
	}
	return images, nil
}

func randomLayer(mib int, seed, repo, inst uint64) (v1.Layer, error) {
	return random.Layer(int64(mib)<<20, types.DockerLayer, random.WithSource(mathrand.NewSource(int64(seed<<40|repo<<20|inst))))
}

func push(ctx context.Context, ref string, img v1.Image) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	if err := remote.Write(r, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	return nil
}

// sweepBytes is what one sweep's images add to the base.
func sweepBytes(p params) int64 {
	return int64(p.repos*p.envMiB+p.repos*p.instances*p.layerMiB) << 20
}

// lowerBounds are the two the sweep cannot beat.
type lowerBounds struct{ work, link time.Duration }

func bounds(p params) lowerBounds {
	tasks := p.repos * p.instances * p.rollouts
	perSecond := float64(p.bandwidthMiB << 20)
	firstPull := time.Duration(float64(int64(p.envMiB+p.layerMiB)<<20) / perSecond * float64(time.Second))
	waves := (tasks + p.slots - 1) / p.slots
	return lowerBounds{
		work: time.Duration(waves)*p.task + firstPull,
		link: time.Duration(float64(sweepBytes(p))/perSecond*float64(time.Second)) + p.task,
	}
}

func report(least lowerBounds, results map[bool][]result) {
	walls := func(planned bool) []float64 {
		var w []float64
		for _, r := range results[planned] {
			w = append(w, r.wall.Seconds())
		}
		return w
	}
	without, with := walls(false), walls(true)
	if len(without) == 0 || len(with) == 0 {
		return
	}
	bound := max(least.work, least.link).Seconds()
	fmt.Printf("\nmean wall: unplanned %.1f s (%.2fx the bound), planned %.1f s (%.2fx the bound): planned/unplanned %.2fx\n",
		stats.Mean(without), stats.Mean(without)/bound, stats.Mean(with), stats.Mean(with)/bound, stats.Mean(with)/stats.Mean(without))
	var ratios []string
	for i := range min(len(without), len(with)) {
		ratios = append(ratios, fmt.Sprintf("%.2fx", with[i]/without[i]))
	}
	fmt.Printf("planned/unplanned per round: %v\n", ratios)
}
