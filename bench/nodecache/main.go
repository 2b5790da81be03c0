// Command nodecache benchmarks asrl-prepull-agent on a node holding
// -images SWE-bench-shaped images (5,000: a shared Debian base, per-repo
// environment layers, two layers of each instance's own). The built agent
// runs against the local test cluster's API server and a fake runtime
// (internal/testcri: no runtime here can hold 5,000 multi-GB images); the
// same agent on an empty node is the baseline. It reports
//
//   - the NodeImageCache's size as the API server returns it (target under
//     1 MiB);
//
//   - the agent's resident memory once settled and at its peak (target
//     under 30 MiB), and as a ratio to the agent on an empty node;
//
//   - the agent's CPU for its first read and publish, per image change
//     (one image pulled or removed), and per minute idle;
//
//   - the time from an image change to the object showing it (p50, p99).
//
//     go run ./bench/nodecache [-images 5000] [-changes 50] [-idle 30s]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/benchcluster"
	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/proc"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func main() {
	// As the commands do: controller-runtime, which the engine and the
	// test cluster use, logs through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	images := flag.Int("images", 5000, "images on the node")
	changes := flag.Int("changes", 50, "image changes to time (half pulls, half removals)")
	idle := flag.Duration("idle", 30*time.Second, "how long to measure the agent idle")
	memLimit := flag.String("gomemlimit", "20MiB", "GOMEMLIMIT of the agent, as manifests/prepull-agent sets it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *images, *changes, *idle, *memLimit); err != nil {
		fmt.Fprintln(os.Stderr, "bench/nodecache:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, images, changes int, idle time.Duration, memLimit string) error {
	var bin string
	b, err := benchcluster.Start(ctx, "nodecache", benchcluster.Options{
		Build: func(dir string) (err error) {
			bin, err = testcluster.BuildCommand(dir, "asrl-prepull-agent")
			return err
		},
		Cluster: []testcluster.Option{testcluster.WithNodes()},
	})
	if err != nil {
		return err
	}
	defer b.Stop()
	cluster, clients, dir := b.Cluster, b.Clients, b.Dir

	empty, err := measure(ctx, cluster, clients, bin, filepath.Join(dir, "empty"), nil, 0, 0, memLimit)
	if err != nil {
		return fmt.Errorf("the agent on an empty node: %w", err)
	}
	all := testcri.SWEBench(images + changes)
	full, err := measure(ctx, cluster, clients, bin, filepath.Join(dir, "full"), all[:images], changes, idle, memLimit)
	if err != nil {
		return fmt.Errorf("the agent on a node with %d images: %w", images, err)
	}
	mib := proc.MiB
	fmt.Printf("asrl-prepull-agent, %d images on the node (empty node as the baseline), GOMEMLIMIT=%s\n", images, memLimit)
	fmt.Printf("  NodeImageCache             %d bytes (%.2f of 1 MiB), %d of %d images listed\n", full.objectBytes, float64(full.objectBytes)/(1<<20), full.listed, images)
	fmt.Printf("  RSS settled                %s (empty node %s, %.2fx); the binary's pages %s, the rest %s\n", mib(full.rss), mib(empty.rss),
		float64(full.rss)/float64(empty.rss), mib(full.file), mib(full.rss-full.file))
	fmt.Printf("  RSS peak                   %s (empty node %s, %.2fx)\n", mib(full.peak), mib(empty.peak), float64(full.peak)/float64(empty.peak))
	fmt.Printf("  CPU, first read + publish  %.0f ms (empty node %.0f ms)\n", full.firstCPU.Seconds()*1000, empty.firstCPU.Seconds()*1000)
	fmt.Printf("  CPU per image change       %.1f ms\n", full.changeCPU.Seconds()*1000)
	fmt.Printf("  CPU idle                   %.0f ms per minute\n", full.idleCPU.Seconds()*1000)
	fmt.Printf("  change to object           p50 %v, p99 %v\n", quantile(full.latencies, 0.5), quantile(full.latencies, 0.99))
	return nil
}

// result is what one agent run measured.
type result struct {
	objectBytes, rss, peak, file int64
	listed                       int
	firstCPU, changeCPU, idleCPU time.Duration
	latencies                    []time.Duration
}

// measure runs the agent for a node of its own on a fake runtime holding
// imgs, then makes changes (pulls of images it does not hold, then their
// removal) one at a time, then leaves it idle.
func measure(ctx context.Context, cluster *testcluster.Cluster, clients *kube.Clients, bin, dir string, imgs []nodecache.RuntimeImage, changes int, idle time.Duration, memLimit string) (result, error) {
	var r result
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + filepath.Base(dir)}}
	if err := clients.Client.Create(ctx, node); err != nil {
		return r, err
	}
	defer clients.Client.Delete(context.WithoutCancel(ctx), node)
	rt, err := testcri.Start(dir)
	if err != nil {
		return r, err
	}
	defer rt.Stop()
	rt.Add(imgs...)
	extra := testcri.SWEBench(len(imgs) + changes)[len(imgs):]

	w, err := clients.Client.Watch(ctx, &v1alpha1.NodeImageCacheList{}, &client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node.Name)})
	if err != nil {
		return r, err
	}
	defer w.Stop()
	// next waits for the object to satisfy ok.
	next := func(what string, ok func(*v1alpha1.NodeImageCache) bool) error {
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case ev, open := <-w.ResultChan():
				if !open {
					return fmt.Errorf("the watch of NodeImageCache %s ended waiting for %s", node.Name, what)
				}
				if c, isCache := ev.Object.(*v1alpha1.NodeImageCache); isCache && ok(c) {
					return nil
				}
			case <-timeout:
				return fmt.Errorf("NodeImageCache %s: no %s after 2 minutes", node.Name, what)
			}
		}
	}

	agent, err := cluster.StartProcess(node.Name, bin, []string{"--node-name=" + node.Name, "--runtime-endpoint=" + rt.Endpoint,
		"--kubeconfig=" + cluster.Kubeconfig(), "--resync=10m"}, nil, "GOMEMLIMIT="+memLimit)
	if err != nil {
		return r, err
	}
	defer agent.Stop()
	pid := agent.Pid()
	if err := next("first publish", func(c *v1alpha1.NodeImageCache) bool { return int(c.ImageCount) == len(imgs) }); err != nil {
		return r, err
	}
	if r.firstCPU, err = proc.CPU(pid); err != nil {
		return r, err
	}

	before := r.firstCPU
	for i := range changes {
		img := extra[i/2]
		start := time.Now()
		if i%2 == 0 {
			rt.Add(img)
		} else {
			rt.Remove(img.ManifestDigest)
		}
		want := len(imgs) + (i+1)%2
		if err := next(fmt.Sprintf("change %d", i), func(c *v1alpha1.NodeImageCache) bool { return int(c.ImageCount) == want }); err != nil {
			return r, err
		}
		r.latencies = append(r.latencies, time.Since(start))
	}
	after, err := proc.CPU(pid)
	if err != nil {
		return r, err
	}
	if changes > 0 {
		r.changeCPU = (after - before) / time.Duration(changes)
	}
	if idle > 0 {
		time.Sleep(idle)
		end, err := proc.CPU(pid)
		if err != nil {
			return r, err
		}
		r.idleCPU = (end - after) * time.Duration(time.Minute) / idle
	}
	if r.rss, r.peak, r.file, err = proc.Memory(pid); err != nil {
		return r, err
	}
	raw, err := clients.Kube.CoreV1().RESTClient().Get().AbsPath("/apis/sandbox-fleet.io/v1alpha1/nodeimagecaches", node.Name).DoRaw(ctx)
	if err != nil {
		return r, err
	}
	r.objectBytes = int64(len(raw))
	cache := &v1alpha1.NodeImageCache{}
	if err := clients.Client.Get(ctx, client.ObjectKey{Name: node.Name}, cache); err != nil {
		return r, err
	}
	r.listed = len(cache.Images)
	return r, nil
}

func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))].Round(time.Millisecond)
}
