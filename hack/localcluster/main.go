// Command localcluster starts, for a person, the same local cluster the tests
// use — etcd, kube-apiserver, controller-manager, scheduler, the Agent
// Sandbox controller and kwok nodes on 127.0.0.1 — and leaves it running
// until `localcluster down`.
//
//	go run ./hack/localcluster up     # start it and print how to use it
//	go run ./hack/localcluster -real-node up   # with a real node (root) enforcing NetworkPolicies
//	go run ./hack/localcluster -real-node -install up   # and the components
//	go run ./hack/localcluster env    # print the KUBECONFIG export
//	go run ./hack/localcluster down   # stop it and remove its files
//	go run ./hack/localcluster unfence  # remove a dead real node's NetworkPolicy rules from the host
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testinstall"
)

// defaultDir is the run directory when -dir names none.
var defaultDir = filepath.Join(os.TempDir(), "sandbox-fleet-localcluster")

// command is the command line that runs verb on the cluster in dir: the
// hints name the cluster they are about, not the default one.
func command(dir, verb string) string {
	if dir == defaultDir {
		return "go run ./hack/localcluster " + verb
	}
	return "go run ./hack/localcluster -dir " + dir + " " + verb
}

func main() {
	dir := flag.String("dir", defaultDir, "run directory: kubeconfig, PKI, etcd data and component logs")
	nodes := flag.Int("nodes", 3, "number of kwok nodes (0 by default with --real-node, so pods land on the real one)")
	realNode := flag.Bool("real-node", false, "add a real node: containerd and a kubelet on this machine (needs root and `make node-deps`)")
	agentSandbox := flag.String("agent-sandbox", "", "the Agent Sandbox line to run, by version (v0.5.6, v1.0.1; default: $"+testcluster.AgentSandboxEnv+", else the newest `make testbin` built)")
	install := flag.Bool("install", false, "install the components on the real node as the deploy test does (needs --real-node)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: localcluster [flags] up|down|env|unfence\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	nodesSet := false
	flag.Visit(func(f *flag.Flag) { nodesSet = nodesSet || f.Name == "nodes" })
	if *realNode && !nodesSet {
		*nodes = 0
	}
	if *install && !*realNode {
		fmt.Fprintln(os.Stderr, "localcluster: --install needs --real-node: the components run as Pods on it")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *dir, *agentSandbox, *nodes, *realNode, *install); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(1)
	}
}

func run(verb, dir, agentSandbox string, nodes int, realNode, install bool) error {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	switch verb {
	case "up":
		if testcluster.Running(dir) {
			return fmt.Errorf("a cluster is already running in %s; stop it with `%s`", dir, command(dir, "down"))
		}
		// Leftovers of a cluster that was not stopped cleanly.
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		opts := []testcluster.Option{testcluster.Detached(), testcluster.WithDir(dir), testcluster.WithAgentSandbox(agentSandbox),
			testcluster.WithNodes(testcluster.FakeNodes("kwok-node", nodes, testcluster.DefaultCapacity(), nil)...)}
		if realNode {
			opts = append(opts, testcluster.WithRealNode(), testcluster.WithNetworkPolicies())
		}
		c, err := testcluster.Start(context.Background(), opts...)
		if err != nil {
			return err
		}
		fmt.Printf("Local cluster is up: Agent Sandbox %s, %d kwok nodes", c.AgentSandboxVersion(), nodes)
		if realNode {
			fmt.Printf(", real node %s pulling from registry %s", c.RealNodeName(), c.RegistryAddr())
		}
		fmt.Printf(", Agent Sandbox controller; logs in %s\n\n", c.LogDir())
		fmt.Printf("Point kubectl at it:\n  export KUBECONFIG=%s\n\n", kubeconfig)
		if install {
			bin, err := testcluster.BinDir()
			if err != nil {
				return err
			}
			overlay := filepath.Join(dir, "install")
			if err := os.MkdirAll(overlay, 0o755); err != nil {
				return err
			}
			if _, err := testinstall.OnRealNode(context.Background(), c, filepath.Join(bin, "kubectl"), overlay); err != nil {
				return fmt.Errorf("installing the components (the cluster is still up): %w", err)
			}
			fmt.Printf("The components are installed from %s. Run the e2e suite against them:\n  SANDBOX_FLEET_E2E_KUBECONFIG=%s SANDBOX_FLEET_E2E_REGISTRY=%s go test -timeout 30m ./e2e/\n\n",
				overlay, kubeconfig, c.RegistryAddr())
		}
		fmt.Printf("Stop it:\n  %s\n", command(dir, "down"))
		return nil
	case "env":
		if !testcluster.Running(dir) {
			return fmt.Errorf("no cluster is running in %s; start one with `%s`", dir, command(dir, "up"))
		}
		fmt.Printf("export KUBECONFIG=%s\n", kubeconfig)
		return nil
	case "down":
		if err := testcluster.StopDetached(dir); err != nil {
			return err
		}
		fmt.Printf("Local cluster in %s stopped and removed.\n", dir)
		return nil
	case "unfence":
		if err := testcluster.RemoveKubeRouterRules(); err != nil {
			return err
		}
		fmt.Println("kube-router's chains and ipsets are gone from this machine.")
		return nil
	default:
		return fmt.Errorf("unknown verb %q: use up, down, env or unfence", verb)
	}
}
