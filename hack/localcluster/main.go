// Command localcluster starts, for a person, the same local cluster the tests
// use — etcd, kube-apiserver, controller-manager, scheduler, the Agent
// Sandbox controller and kwok nodes on 127.0.0.1 — and leaves it running
// until `localcluster down`, supervised as a real cluster's nodes keep
// their components: one that exits (the Agent Sandbox controller does when
// it loses its leader Lease, as while the API server is unreachable) is
// started again (by a `localcluster supervise` process that up starts and
// down stops).
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
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

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
		fmt.Fprintf(flag.CommandLine.Output(), "usage: localcluster [flags] up|down|env|unfence (and supervise, which up starts)\n")
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
		if err := startSupervisor(dir); err != nil {
			return fmt.Errorf("supervising the cluster (it is up; stop it with `%s`): %w", command(dir, "down"), err)
		}
		fmt.Printf("Local cluster is up: Agent Sandbox %s, %d kwok nodes", c.AgentSandboxVersion(), nodes)
		if realNode {
			fmt.Printf(", real node %s pulling from registry %s", c.RealNodeName(), c.RegistryAddr())
		}
		fmt.Printf(", Agent Sandbox controller; a component that exits is started again; logs in %s\n\n", c.LogDir())
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
			if _, err := testinstall.OnRealNode(context.Background(), c, filepath.Join(bin, "kubectl"), overlay, ""); err != nil {
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
	case "supervise":
		// Started by up, in a session of its own: it lives until down.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return testcluster.Supervise(ctx, dir)
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

// startSupervisor starts `localcluster supervise` for the cluster in dir,
// detached as the cluster's components are, logging to logs/supervisor.log,
// and returns once it has taken the cluster on: a down right after up
// stops it first.
func startSupervisor(dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(dir, "logs", "supervisor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(exe, "-dir", dir, "supervise")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); !testcluster.Supervised(dir); time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			return fmt.Errorf("the supervisor exited (%v): see %s", err, log.Name())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the supervisor did not take the cluster on in 30s: see %s", log.Name())
		}
	}
	return nil
}
