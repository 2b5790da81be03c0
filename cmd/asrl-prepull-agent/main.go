// Command asrl-prepull-agent runs on every node (a DaemonSet) and keeps
// the node's NodeImageCache current; see pkg/nodecache and manifests/.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/version"
)

func main() {
	a := nodecache.Agent{Version: version.Get().GitVersion, Log: klog.NewKlogr()}
	var endpoint string
	flag.StringVar(&a.Node, "node-name", os.Getenv("NODE_NAME"), "the node this agent runs on (default: $NODE_NAME)")
	flag.StringVar(&endpoint, "runtime-endpoint", "unix:///run/containerd/containerd.sock", "the container runtime's CRI socket")
	flag.DurationVar(&a.Resync, "resync", 5*time.Minute, "how often the runtime is read in full and the object refreshed without a change")
	flag.DurationVar(&a.Settle, "settle", 300*time.Millisecond, "how long to wait after an image change for more before reading")
	flag.DurationVar(&a.Poll, "poll", time.Second, "how often a runtime without containerd's event stream is polled for changes")
	klog.InitFlags(nil)
	flag.Parse()
	if a.Node == "" {
		fmt.Fprintln(os.Stderr, "asrl-prepull-agent: --node-name (or $NODE_NAME, from the downward API's spec.nodeName) is needed")
		os.Exit(2)
	}
	if err := run(&a, endpoint); err != nil {
		fmt.Fprintf(os.Stderr, "asrl-prepull-agent: %v\n", err)
		os.Exit(1)
	}
}

func run(a *nodecache.Agent, endpoint string) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	clients, err := kube.ForConfig(cfg, "")
	if err != nil {
		return err
	}
	rt, err := nodecache.Dial(endpoint)
	if err != nil {
		return err
	}
	defer rt.Close()
	a.Runtime, a.Client = rt, clients.Client
	return a.Run(ctrl.SetupSignalHandler())
}
