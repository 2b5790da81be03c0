// Command kind runs the e2e suite on a kind cluster, for machines with a
// Docker engine (`make e2e-kind`): it creates the cluster from
// e2e/kind/cluster.yaml through kind's Go library (no kind binary needed);
// starts the test registry (the local cluster's, on 127.0.0.1) and relays
// it to the kind nodes on their Docker network's gateway, and has their
// containerd pull every registry's images from it, as the local cluster's
// real node does; pushes the test images and an image of the Agent Sandbox
// controller of the line a test cluster would run (SANDBOX_FLEET_AGENT_SANDBOX,
// else the newest) there (hack/testimages) and installs it from that
// release's manifests;
// labels the workers as sandbox nodes and installs the project's
// components as internal/testinstall does for the local cluster's deploy
// test; runs `go test ./e2e/` against the cluster, with the registry, so
// that the node tests drive the installed agent as TestInstalledAsShipped
// does on the local cluster; and deletes the cluster whatever happens.
//
// CI on this project's machines has no Docker engine that runs kind's
// privileged nodes, so this is not run there; the suite's existing-cluster
// mode with the components installed is, on the local cluster
// (docs/contributing.md).
//
//	go run ./e2e/kind [-keep]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/kind/pkg/cluster"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testinstall"
)

const clusterName = "sandbox-fleet-e2e"

func main() {
	keep := flag.Bool("keep", false, "keep the cluster after the suite, for a look (the test registry stops with the command)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-kind:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, keep bool) error {
	// The registry's relay ends with the run.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	root, err := testcluster.RepoRoot()
	if err != nil {
		return err
	}
	bin, err := testcluster.BinDir()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(bin, "kubectl")
	work, err := os.MkdirTemp("", "e2e-kind-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	kubeconfig := filepath.Join(work, "kubeconfig")

	provider := cluster.NewProvider(cluster.ProviderWithDocker())
	if err := provider.Create(clusterName, cluster.CreateWithConfigFile(filepath.Join(root, "e2e", "kind", "cluster.yaml")),
		cluster.CreateWithKubeconfigPath(kubeconfig), cluster.CreateWithWaitForReady(2*time.Minute)); err != nil {
		return fmt.Errorf("creating the kind cluster: %w", err)
	}
	if !keep {
		defer func() {
			if err := provider.Delete(clusterName, kubeconfig); err != nil {
				fmt.Fprintln(os.Stderr, "e2e-kind: deleting the cluster:", err)
			}
		}()
	}
	nodeList, err := provider.ListInternalNodes(clusterName)
	if err != nil {
		return err
	}
	k := func(stdin []byte, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
		}
		return out, nil
	}

	// The registry listens on loopback, where this process pushes; the
	// nodes reach it through a relay on their network's gateway.
	registry, registryProc, err := testcluster.StartRegistry(ctx, filepath.Join(work, "registry"))
	if err != nil {
		return err
	}
	defer registryProc.Stop()
	gateway, subnet, err := dockerNetwork(ctx)
	if err != nil {
		return err
	}
	relayed, err := relay(ctx, net.JoinHostPort(gateway, "0"), registry)
	if err != nil {
		return err
	}
	hosts := testcluster.MirrorHosts(relayed)
	for _, n := range nodeList {
		write := n.Command("sh", "-c", "mkdir -p /etc/containerd/certs.d/_default && cat > /etc/containerd/certs.d/_default/hosts.toml")
		if err := write.SetStdin(strings.NewReader(hosts)).Run(); err != nil {
			return fmt.Errorf("pointing %s's containerd at the test registry: %w", n.String(), err)
		}
	}

	line, err := testcluster.AgentSandbox("")
	if err != nil {
		return err
	}
	if _, err := goRun(ctx, root, "./hack/testimages", "-controller", line.Controller(), "-controller-version", line.Version, registry); err != nil {
		return err
	}
	controller, err := goRun(ctx, root, "./hack/testimages", "-controller-version", line.Version, "-print-controller-image")
	if err != nil {
		return err
	}
	rendered, err := k(nil, "kustomize", line.Manifests())
	if err != nil {
		return err
	}
	rendered = bytes.ReplaceAll(rendered, []byte("ko://sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"), bytes.TrimSpace(controller))
	if _, err := k(rendered, "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	if _, err := k(nil, "-n", "agent-sandbox-system", "rollout", "status", "deployment/agent-sandbox-controller", "--timeout=3m"); err != nil {
		return err
	}

	// The components, as an admin installs them on sandbox nodes (the
	// workers): the kind nodes keep containerd's socket where the
	// DaemonSet expects it.
	if _, err := k(nil, "label", "nodes", "-l", "!node-role.kubernetes.io/control-plane", testinstall.SandboxNodeLabel+"=true"); err != nil {
		return err
	}
	overlay := filepath.Join(work, "install")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return err
	}
	// kind's API server presents webhooks no client certificate; kindnet
	// enforces NetworkPolicy, so the webhook's callers are kept to the
	// nodes' network.
	if _, err := testinstall.Install(ctx, testinstall.Options{
		Kubectl: kubectl, Kubeconfig: kubeconfig, Registry: registry + "/sandbox-fleet", Dir: overlay,
		WebhookCallersCIDR: subnet,
	}); err != nil {
		return err
	}

	test := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout=60m", "-v", "./e2e/")
	test.Dir = root
	test.Env = append(os.Environ(), "SANDBOX_FLEET_E2E_KUBECONFIG="+kubeconfig, "SANDBOX_FLEET_E2E_REGISTRY="+registry)
	test.Stdout, test.Stderr = os.Stdout, os.Stderr
	return test.Run()
}

// dockerNetwork is the host's address on kind's Docker network, and the
// network's IPv4 subnet: the nodes' addresses, whence the API server calls
// webhooks.
func dockerNetwork(ctx context.Context) (gateway, subnet string, err error) {
	out, err := exec.CommandContext(ctx, "docker", "network", "inspect", "kind", "--format", "{{range .IPAM.Config}}{{.Gateway}},{{.Subnet}} {{end}}").Output()
	if err != nil {
		return "", "", fmt.Errorf("docker network inspect kind: %w", err)
	}
	for _, pair := range strings.Fields(string(out)) {
		gw, sn, _ := strings.Cut(pair, ",")
		if ip := net.ParseIP(gw); ip != nil && ip.To4() != nil {
			return gw, sn, nil
		}
	}
	return "", "", fmt.Errorf("kind's Docker network has no IPv4 gateway (%q)", out)
}

// relay accepts connections on addr and relays each to target until ctx
// ends, and returns the address it listens on.
func relay(ctx context.Context, addr, target string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				// Either side closing ends both.
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return l.Addr().String(), nil
}

// goRun runs a Go program of the module and returns its output.
func goRun(ctx context.Context, root string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"run"}, args...)...)
	cmd.Dir, cmd.Stderr = root, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go run %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}
