// Command asrl-prepull-agent runs on every node (a DaemonSet) and keeps
// the node's NodeImageCache current; see pkg/nodecache and manifests/.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/internal/nodecache/agent"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/version"
)

func main() {
	ctrllog.SetLogger(klog.NewKlogr())
	a := agent.Agent{Version: version.Get().GitVersion, Log: klog.NewKlogr()}
	var endpoint, kubeconfig, imageFS, allowed string
	var maxHighWater int
	flag.StringVar(&a.Node, "node-name", os.Getenv("NODE_NAME"), "the node this agent runs on (default: $NODE_NAME)")
	flag.StringVar(&endpoint, "runtime-endpoint", "unix:///run/containerd/containerd.sock", "the container runtime's CRI socket")
	flag.StringVar(&imageFS, "image-fs-path", "", "a directory on the runtime's image filesystem, where its size and free space are read (default: the runtime's own mountpoint)")
	flag.StringVar(&a.StateDir, "state-dir", "", "a directory kept across restarts, where the agent records what it pulled for jobs that remove it (default: none; a restarted agent then removes nothing)")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: the Pod's service account)")
	flag.DurationVar(&a.Resync, "resync", 5*time.Minute, "how often the runtime is read in full and the object refreshed without a change")
	flag.DurationVar(&a.Settle, "settle", 300*time.Millisecond, "how long to wait after an image change for more before reading")
	flag.DurationVar(&a.MinWriteInterval, "min-write-interval", 10*time.Second, "the least time between two writes of the NodeImageCache: changes meanwhile are gathered into the next")
	flag.DurationVar(&a.Poll, "poll", time.Second, "how often a runtime without containerd's event stream is polled for changes")
	flag.DurationVar(&a.PullInterval, "pull-interval", 2*time.Second, "how often the layers being pulled are looked at and, when they moved, patched into the NodeImageCache's pulls (0: never)")
	flag.StringVar(&allowed, "allowed-registries", "", "comma-separated registries, or registry/repository prefixes, PrepullJobs may pull from (default: none, so no job pulls anything)")
	flag.IntVar(&maxHighWater, "max-high-water", 85, "cap, in percent of the image filesystem, on every PrepullJob's diskHighWaterPercent (1-100)")
	klog.InitFlags(nil)
	flag.Parse()
	var err error
	if a.Limits.AllowedRegistries, err = nodecache.ParseRegistries(allowed); err != nil {
		fmt.Fprintf(os.Stderr, "asrl-prepull-agent: --allowed-registries: %v\n", err)
		os.Exit(2)
	}
	if maxHighWater < 1 || maxHighWater > 100 {
		fmt.Fprintf(os.Stderr, "asrl-prepull-agent: --max-high-water %d: must be a percentage, 1 to 100\n", maxHighWater)
		os.Exit(2)
	}
	a.Limits.MaxHighWaterPercent = int32(maxHighWater)
	if a.Node == "" {
		fmt.Fprintln(os.Stderr, "asrl-prepull-agent: --node-name (or $NODE_NAME, from the downward API's spec.nodeName) is needed")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, &a, endpoint, kubeconfig, imageFS); err != nil {
		fmt.Fprintf(os.Stderr, "asrl-prepull-agent: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, a *agent.Agent, endpoint, kubeconfig, imageFS string) error {
	cfg, err := rest.InClusterConfig()
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return err
	}
	if a.Client, err = agent.NewClient(cfg); err != nil {
		return err
	}
	if a.Runtime, err = agent.Dial(endpoint); err != nil {
		return err
	}
	defer a.Runtime.Close()
	a.Runtime.ImageFSPath = imageFS
	return a.Run(ctx)
}
