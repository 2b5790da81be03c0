// Command kind runs the e2e suite on a kind cluster, for machines with a
// Docker engine (`make e2e-kind`): it creates the cluster from
// e2e/kind/cluster.yaml through kind's Go library (no kind binary needed),
// loads into its nodes the test images and an image of the pinned Agent
// Sandbox controller (hack/testimages), installs the controller, installs
// the project's components as internal/testinstall does for the local
// cluster's deploy test — the same overlay of manifests/default and
// manifests/scheduler, the images loaded into the nodes where the local
// test pushes them to its registry — runs `go test ./e2e/` against the
// cluster, and deletes it whatever happens.
//
// CI on this project's machines has no Docker engine that runs kind's
// privileged nodes, so this is not run there; what it shares with the
// local deploy test (testinstall) is.
//
//	go run ./e2e/kind [-keep]
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/sandbox-fleet/sandbox-fleet/internal/componentimage"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testinstall"
)

const name = "sandbox-fleet-e2e"

func main() {
	keep := flag.Bool("keep", false, "keep the cluster after the suite, for a look")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-kind:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, keep bool) error {
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
	if err := provider.Create(name, cluster.CreateWithConfigFile(filepath.Join(root, "e2e", "kind", "cluster.yaml")),
		cluster.CreateWithKubeconfigPath(kubeconfig), cluster.CreateWithWaitForReady(2*time.Minute)); err != nil {
		return fmt.Errorf("creating the kind cluster: %w", err)
	}
	if !keep {
		defer func() {
			if err := provider.Delete(name, kubeconfig); err != nil {
				fmt.Fprintln(os.Stderr, "e2e-kind: deleting the cluster:", err)
			}
		}()
	}
	nodeList, err := provider.ListInternalNodes(name)
	if err != nil {
		return err
	}
	load := func(archive string) error {
		for _, n := range nodeList {
			if err := loadArchive(n, archive); err != nil {
				return fmt.Errorf("loading %s into %s: %w", archive, n.String(), err)
			}
		}
		return nil
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

	// The test images and the controller's, as hack/testimages packs
	// them, one archive path a line.
	archives, err := goRun(ctx, root, "./hack/testimages", "-controller", filepath.Join(bin, "agent-sandbox-controller"), filepath.Join(work, "images"))
	if err != nil {
		return err
	}
	for _, archive := range strings.Fields(string(archives)) {
		if err := load(archive); err != nil {
			return err
		}
	}
	controller, err := goRun(ctx, root, "./hack/testimages", "-print-controller-image")
	if err != nil {
		return err
	}
	sandboxDir, err := goList(ctx, filepath.Join(root, "hack", "tools"), "sigs.k8s.io/agent-sandbox")
	if err != nil {
		return err
	}
	rendered, err := k(nil, "kustomize", filepath.Join(sandboxDir, "k8s"))
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

	// The components, as an admin installs them on sandbox nodes: the
	// kind nodes keep containerd's socket where the DaemonSet expects it.
	if _, err := k(nil, "label", "nodes", "--all", "sandbox-fleet.io/sandbox-node=true"); err != nil {
		return err
	}
	overlay := filepath.Join(work, "install")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return err
	}
	if _, err := testinstall.Install(ctx, testinstall.Options{
		Kubectl: kubectl, Kubeconfig: kubeconfig,
		Registry: "ghcr.io/sandbox-fleet", Version: "v0.0.0-e2e." + strconv.FormatInt(time.Now().Unix(), 10),
		Publish: func(ctx context.Context, ref string, img v1.Image) error {
			archive := filepath.Join(work, filepath.Base(strings.Split(ref, ":")[0])+".tar")
			if err := componentimage.WriteArchive(archive, ref, img); err != nil {
				return err
			}
			return load(archive)
		},
		AllowedRegistries: "docker.io/sandbox-fleet",
		Dir:               overlay,
	}); err != nil {
		return err
	}

	test := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "./e2e/")
	test.Dir = root
	test.Env = append(os.Environ(), "SANDBOX_FLEET_E2E_KUBECONFIG="+kubeconfig)
	test.Stdout, test.Stderr = os.Stdout, os.Stderr
	return test.Run()
}

// loadArchive loads a docker archive into a kind node's containerd.
func loadArchive(n nodes.Node, archive string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	return nodeutils.LoadImageArchive(n, bufio.NewReader(f))
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

// goList is the directory of module in the module at dir.
func goList(ctx context.Context, dir, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}
