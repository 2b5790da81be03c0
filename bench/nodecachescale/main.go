// Command nodecachescale measures what NodeImageCaches cost a cluster at
// scale, on the local test cluster with -nodes kwok nodes (1,000), each
// with a NodeImageCache of -images-per-node SWE-bench-shaped images
// (5,000) drawn from -repos × -instances:
//
//   - the size of one node's object;
//   - the resident memory of asrl-scheduler and asrl-webhook (with a
//     policy asking for node-cache affinity, so it follows every cache),
//     the built binaries, once they follow every cache, against the same
//     processes before there was any cache to follow;
//   - what the agents write: -churn-nodes nodes (20) each pull a burst of
//     -burst images (10) over -burst-seconds (20), and each node's writer
//     paces its writes as the agent does (agent.NextRead: after
//     --settle, no sooner than --min-write-interval after the last), with
//     the shipped interval (10 s) and with none (a write per change). It
//     reports the writes and bytes each node sent for its burst, and the
//     MiB a minute -nodes nodes would send each pulling such a burst a
//     minute (the per-node figure times the nodes: writes are per node).
//
// The control plane and this process run on CPU 0, the scheduler and the
// webhook on CPU 1.
//
//	go run ./bench/nodecachescale [-nodes 1000] [-images-per-node 5000] [-churn-nodes 20]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/benchcluster"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/proc"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/swebench"
	"github.com/sandbox-fleet/sandbox-fleet/internal/nodecache/agent"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testscheduler"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

type params struct {
	nodes, imagesPerNode, repos, instances int
	churnNodes, burst                      int
	burstSeconds                           time.Duration
}

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	var p params
	flag.IntVar(&p.nodes, "nodes", 1000, "kwok nodes, each with a NodeImageCache")
	flag.IntVar(&p.imagesPerNode, "images-per-node", 5000, "images in each node's cache")
	flag.IntVar(&p.repos, "repos", 500, "repositories the images are drawn from")
	flag.IntVar(&p.instances, "instances", 100, "images (task instances) per repository")
	flag.IntVar(&p.churnNodes, "churn-nodes", 20, "nodes whose agents' writes are measured")
	flag.IntVar(&p.burst, "burst", 10, "images each of those nodes pulls in its burst")
	flag.DurationVar(&p.burstSeconds, "burst-seconds", 20*time.Second, "how long a burst takes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, p); err != nil {
		fmt.Fprintln(os.Stderr, "nodecachescale:", err)
		os.Exit(1)
	}
}

const family = "swebench"

func run(ctx context.Context, p params) error {
	var schedulerBin, webhookBin string
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	b, err := benchcluster.Start(ctx, "nodecachescale", benchcluster.Options{
		Build: func(dir string) (err error) {
			if schedulerBin, err = testscheduler.Build(dir); err != nil {
				return err
			}
			webhookBin, err = testcluster.BuildCommand(dir, "asrl-webhook")
			return err
		},
		Pin:     true,
		Cluster: []testcluster.Option{testcluster.WithNodes(testcluster.FakeNodes("node", p.nodes, capacity, nil)...)},
		QPS:     1000, Burst: 2000,
	})
	if err != nil {
		return err
	}
	defer b.Stop()
	cluster, clients := b.Cluster, b.Clients
	c := clients.Client

	// The readers, started before any cache exists: their memory then
	// is the baseline.
	sched, err := testscheduler.Start(ctx, cluster, schedulerBin, nil, 1)
	if err != nil {
		return err
	}
	ns, err := testcluster.CreateNamespace(ctx, clients.Kube, "nodecachescale")
	if err != nil {
		return err
	}
	hook, err := testwebhook.Start(ctx, cluster, ns, webhookBin, 1)
	if err != nil {
		return err
	}
	defer hook.Close()
	pol := &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "node-cache"}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		NodeCache:         &v1alpha1.NodeCachePolicy{Weight: 50},
		// The Pods placed to see asrl-scheduler follow the caches are no
		// sandboxes.
		OtherPodSelector: &metav1.LabelSelector{},
	}}
	if err := c.Create(ctx, pol); err != nil {
		return err
	}
	if err := hook.WaitForPolicySet(ctx, ns, true); err != nil {
		return err
	}
	// A first sandbox Pod has the webhook follow the caches (it starts
	// to when a policy first asks for them).
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{policy.SandboxPodLabel: "probe"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: swebench.Of(family, 0, 0).Name}}}}
	if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
		return err
	}
	time.Sleep(10 * time.Second)
	before := map[string]usage{}
	for name, pid := range map[string]int{"asrl-scheduler": sched.Pid(), "asrl-webhook": hook.Process.Pid()} {
		if before[name], err = read(pid); err != nil {
			return err
		}
	}

	fmt.Fprintf(os.Stderr, "creating %d NodeImageCaches of %d images\n", p.nodes, p.imagesPerNode)
	rng := rand.New(rand.NewPCG(1, 2))
	held := func() []swebench.Image {
		var out []swebench.Image
		for range p.imagesPerNode {
			out = append(out, swebench.Of(family, rng.IntN(p.repos), rng.IntN(p.instances)))
		}
		return out
	}
	caches := make(chan *v1alpha1.NodeImageCache)
	var objectBytes int
	creates, createCtx := errgroup.WithContext(ctx)
	for range 8 {
		creates.Go(func() error {
			for nic := range caches {
				if err := c.Create(createCtx, nic); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// The last node holds an image no other does: where the scheduler
	// puts a Pod of it tells when it follows every cache.
	only := swebench.Of(family+"-only", 0, 0)
	for i := range p.nodes {
		images := held()
		if i == p.nodes-1 {
			images = append(images, only)
		}
		nic := swebench.NodeCache(fmt.Sprintf("node-%d", i), images)
		if i == 0 {
			b, _ := json.Marshal(nic)
			objectBytes = len(b)
		}
		select {
		case caches <- nic:
		case <-createCtx.Done():
		}
	}
	close(caches)
	if err := creates.Wait(); err != nil {
		return fmt.Errorf("creating the NodeImageCaches: %w", err)
	}
	fmt.Fprintln(os.Stderr, "waiting for the webhook and asrl-scheduler to follow every cache")
	if err := hook.WaitForNodeAffinity(ctx, ns, only.Name); err != nil {
		return err
	}
	// The scheduler follows every cache once a Pod of that image lands on
	// the last node; until then its cache is still filling.
	want := fmt.Sprintf("node-%d", p.nodes-1)
	for i := 0; ; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("placed-%d", i)}, Spec: corev1.PodSpec{
			SchedulerName: testscheduler.SchedulerName, Containers: []corev1.Container{{Name: "c", Image: only.Name}}}}
		if err := c.Create(ctx, pod); err != nil {
			return err
		}
		node, err := testscheduler.BoundTo(ctx, c, pod)
		if err != nil {
			return err
		}
		if node == want {
			break
		}
		if i == 60 {
			return fmt.Errorf("asrl-scheduler still puts a Pod of the last node's own image on %s, not %s, after a minute: it does not follow every cache", node, want)
		}
		time.Sleep(time.Second)
	}
	after := map[string]usage{}
	for name, pid := range map[string]int{"asrl-scheduler": sched.Pid(), "asrl-webhook": hook.Process.Pid()} {
		if after[name], err = read(pid); err != nil {
			return err
		}
	}

	fmt.Fprintln(os.Stderr, "the churn, paced")
	paced, err := churn(ctx, c, p, 10*time.Second)
	if err != nil {
		return fmt.Errorf("the paced churn: %w", err)
	}
	fmt.Fprintln(os.Stderr, "the churn, a write per change")
	unpaced, err := churn(ctx, c, p, 0)
	if err != nil {
		return fmt.Errorf("the unpaced churn: %w", err)
	}
	report(p, objectBytes, before, after, paced, unpaced)
	return nil
}

// usage is a process's memory.
type usage struct{ rss, peak int64 }

func read(pid int) (usage, error) {
	rss, peak, _, err := proc.Memory(pid)
	return usage{rss, peak}, err
}

// writes is what the churn's writers sent.
type writes struct {
	count, bytes int64
}

// churn has p.churnNodes nodes' writers each see p.burst image changes
// spread over p.burstSeconds, and write their object as the agent paces
// it with minInterval; it returns what they wrote.
func churn(ctx context.Context, c client.Client, p params, minInterval time.Duration) (writes, error) {
	const settle = 300 * time.Millisecond
	var mu sync.Mutex
	var total writes
	g, gctx := errgroup.WithContext(ctx)
	for i := range p.churnNodes {
		g.Go(func() error {
			nic := &v1alpha1.NodeImageCache{}
			if err := c.Get(gctx, client.ObjectKey{Name: fmt.Sprintf("node-%d", i)}, nic); err != nil {
				return err
			}
			changes := make(chan struct{}, 1)
			added := make(chan swebench.Image, p.burst)
			go func() {
				for k := range p.burst {
					select {
					case <-gctx.Done():
						return
					case <-time.After(p.burstSeconds / time.Duration(p.burst)):
					}
					added <- swebench.Of(fmt.Sprintf("%s-churn-%d", family, i), 0, k)
					select {
					case changes <- struct{}{}:
					default:
					}
				}
				close(added)
			}()
			var lastWrite time.Time
			for seen := 0; seen < p.burst; {
				select {
				case <-gctx.Done():
					return gctx.Err()
				case <-changes:
				}
				select {
				case <-gctx.Done():
					return gctx.Err()
				case <-time.After(agent.NextRead(settle, minInterval, lastWrite, time.Now())):
				}
				// What the read finds: every image added by now.
				for drained := false; !drained; {
					select {
					case img, ok := <-added:
						if !ok {
							drained = true
							continue
						}
						nic.Images = append(nic.Images, v1alpha1.CachedImage{Names: []string{img.Name}, Layers: []int32{0}})
						seen++
					default:
						drained = true
					}
				}
				b, err := json.Marshal(nic)
				if err != nil {
					return err
				}
				if err := c.Update(gctx, nic); err != nil {
					return err
				}
				lastWrite = time.Now()
				mu.Lock()
				total.count++
				total.bytes += int64(len(b))
				mu.Unlock()
			}
			return nil
		})
	}
	return total, g.Wait()
}

func report(p params, objectBytes int, before, after map[string]usage, paced, unpaced writes) {
	fmt.Printf("%d nodes × %d images (one node's object: %s)\n", p.nodes, p.imagesPerNode, proc.MiB(int64(objectBytes)))
	fmt.Println("| process | RSS, no caches | RSS following every cache | peak | × no caches |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, name := range []string{"asrl-scheduler", "asrl-webhook"} {
		b, a := before[name], after[name]
		fmt.Printf("| %s | %s | %s | %s | %.1f |\n", name, proc.MiB(b.rss), proc.MiB(a.rss), proc.MiB(a.peak), float64(a.rss)/float64(b.rss))
	}
	perNode := func(w writes) (float64, float64) {
		return float64(w.count) / float64(p.churnNodes), float64(w.bytes) / float64(p.churnNodes)
	}
	fmt.Printf("a burst of %d pulls over %v on each of %d nodes\n", p.burst, p.burstSeconds, p.churnNodes)
	fmt.Printf("| agent writes | writes a node | MiB a node | MiB a minute, %d nodes each pulling a burst a minute |\n", p.nodes)
	fmt.Println("| --- | --- | --- | --- |")
	for _, row := range []struct {
		name string
		w    writes
	}{{"a write per change", unpaced}, {"--min-write-interval 10s", paced}} {
		n, b := perNode(row.w)
		fmt.Printf("| %s | %.1f | %.1f | %.0f |\n", row.name, n, b/(1<<20), b*float64(p.nodes)/(1<<20))
	}
}
