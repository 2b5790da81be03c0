package testcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
)

// Host tools the real node uses, from Debian (hack/node-deps.sh).
const (
	runcPath   = "/usr/sbin/runc"
	cniBinDir  = "/usr/lib/cni"
	cgroupRoot = "/sys/fs/cgroup"
)

// The kubelet changes these; they are restored on teardown. The bridge
// plugin turns on forwarding.
var nodeSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"}

// hostPaths are fixed paths, outside the run directory, that the kubelet,
// containerd's shims and libcni create whatever they are configured with.
// Those that did not exist before the node started are removed after it.
var hostPaths = []string{"/var/lib/kubelet", "/run/containerd", "/var/lib/cni", "/var/log/containers"}

// realNode is the kubelet + containerd node and what it changed on the host.
// It is saved with every cluster's state, so that StopDetached can undo
// those changes from another process.
type realNode struct {
	Name    string            `json:"name"` // the machine's hostname, which resolves to 127.0.0.1
	Dir     string            `json:"dir"`
	Bridge  string            `json:"bridge"`
	Subnet  string            `json:"subnet"`
	Cgroup  string            `json:"cgroup"` // the kubelet's cgroupRoot, e.g. /sandbox-fleet-ab12cd
	Sysctls map[string]string `json:"sysctls"`
	// NewHostPaths are the hostPaths this node created.
	NewHostPaths []string `json:"newHostPaths"`
	Registry     string   `json:"registry"` // host:port of the loopback registry
	// APIServer is host:port of the API server, on loopback, to which
	// the node routes its pods' traffic to the kubernetes Service.
	APIServer string `json:"apiServer"`
	// NetworkPolicies is whether kube-router enforces NetworkPolicies
	// for the node (netpol.go), whose rules and ipsets go with it.
	NetworkPolicies bool `json:"networkPolicies,omitempty"`
}

// CRISocket is the path of the real node's containerd socket.
func (n *realNode) CRISocket() string { return filepath.Join(n.Dir, "containerd", "containerd.sock") }

func (n *realNode) containerdRoot() string { return filepath.Join(n.Dir, "containerd", "root") }

// RegistryAddr is host:port of the loopback registry every image reference
// of the real node resolves to.
func (c *Cluster) RegistryAddr() string { return c.node.Registry }

// RealNodeName is the real node's name; empty without WithRealNode.
func (c *Cluster) RealNodeName() string {
	if c.node == nil {
		return ""
	}
	return c.node.Name
}

// CRISocket is the real node's container runtime socket.
func (c *Cluster) CRISocket() string { return c.node.CRISocket() }

// ContainerdRoot is the real node's containerd root, under which it keeps
// its images.
func (c *Cluster) ContainerdRoot() string { return c.node.containerdRoot() }

func (c *Cluster) checkRealNodeHost() error {
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root: the kubelet and containerd manage mounts, cgroups and network namespaces")
	}
	for _, name := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "registry"} {
		if _, err := os.Stat(c.bins.bin(name)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make testbin`", name, c.bins.dir)
		}
	}
	for _, p := range []string{runcPath, filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("a real node needs %s: run `make node-deps` (hack/node-deps.sh installs runc and the CNI plugins from Debian)", p)
		}
	}
	return nil
}

func (c *Cluster) startRealNode(ctx context.Context) error {
	if err := c.checkRealNodeHost(); err != nil {
		return err
	}
	hostname, err := os.Hostname()
	if err != nil {
		return err
	}
	id := strconv.FormatUint(rand.Uint64(), 36)[:6]
	n := &realNode{
		APIServer: strings.TrimPrefix(c.config.Host, "https://"),
		Name:      hostname,
		Dir:       filepath.Join(c.dir, "node"),
		Bridge:    "sf-" + id,
		// Pods of this run only; the third octet varies so that two runs
		// on one machine do not share addresses.
		Subnet:  fmt.Sprintf("10.88.%d.0/24", 1+rand.IntN(250)),
		Cgroup:  "/sandbox-fleet-" + id,
		Sysctls: map[string]string{},
	}
	c.node = n
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	if err := c.startRegistry(ctx); err != nil {
		return err
	}
	if err := testimages.Push(ctx, n.Registry, c.images...); err != nil {
		return err
	}
	if err := n.recordSysctls(); err != nil {
		return err
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			n.NewHostPaths = append(n.NewHostPaths, p)
		}
	}
	// A pod CRI could not remove — a container caught half made, its runc
	// init waiting, as the kubelet stopped — is killed with its shim once
	// containerd is gone, so that its cgroups can go.
	c.cleanups = append(c.cleanups, func() error { return errors.Join(n.killRemaining(c.bins.dir), n.cleanHost()) })
	if err := n.createCgroups(); err != nil {
		return err
	}
	if err := n.routeToAPIServer(); err != nil {
		return err
	}
	if err := c.startContainerd(ctx); err != nil {
		return err
	}
	if err := c.startKubelet(ctx); err != nil {
		return err
	}
	if !c.opts.networkPolicies {
		return nil
	}
	return c.startNetworkPolicies(ctx)
}

// buildTestImages builds the test images, caching their layers in
// .cache/images of the checkout.
func buildTestImages(ctx context.Context) ([]testimages.Image, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	b := &testimages.Builder{Dir: filepath.Join(root, ".cache", "images"),
		Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "testcluster: "+format+"\n", args...) }}
	return b.All(ctx)
}

// serviceCIDR is the API server's --service-cluster-ip-range, which pods
// route to through the bridge (and nowhere else off their subnet); the
// kubernetes Service's ClusterIP is its first address.
const (
	serviceCIDR         = "10.96.0.0/16"
	kubernetesServiceIP = "10.96.0.1"
)

// The API server's and the network plugin's --service-node-port-range. The
// plugin lets any Pod reach a node's own address on these ports, as it must
// for NodePort Services, so no component of the test cluster may listen on
// one: the API server, reached at the kubernetes Service through the node's
// loopback address, would be open to every fenced sandbox.
const (
	nodePortMin = 30000
	nodePortMax = 32767
)

var nodePortRange = fmt.Sprintf("%d-%d", nodePortMin, nodePortMax)

// MirrorHosts is containerd's hosts.toml, for its certs.d/_default, that
// has every registry's images pulled from the plain-HTTP registry at addr
// (host:port).
func MirrorHosts(addr string) string {
	return fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", addr)
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	n := c.node
	cniDir, err := n.writeCNIConfig()
	if err != nil {
		return err
	}
	certsDir := filepath.Join(n.Dir, "containerd", "certs.d", "_default")
	if err := os.MkdirAll(certsDir, 0o755); err != nil {
		return err
	}
	// Every registry resolves to the loopback one: pods keep upstream names
	// and nothing is ever fetched from outside.
	if err := os.WriteFile(filepath.Join(certsDir, "hosts.toml"), []byte(MirrorHosts(n.Registry)), 0o644); err != nil {
		return err
	}
	cd := filepath.Join(n.Dir, "containerd")
	config := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # The host's bounding set lacks CAP_SYS_RESOURCE.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"

    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[5]q
        Root = %[6]q
        SystemdCgroup = false

  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[9]q

  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[10]q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.internal.v1.opt']
  path = %[11]q
`, n.containerdRoot(), filepath.Join(cd, "state"), n.CRISocket(), filepath.Join(cd, "ttrpc.sock"),
		runcPath, filepath.Join(cd, "runc"), cniBinDir, cniDir, testimages.Pause,
		filepath.Dir(certsDir), filepath.Join(cd, "opt"))
	configPath := filepath.Join(cd, "config.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	p, err := c.run("containerd", []string{"--config=" + configPath, "--log-level=warn"},
		// containerd finds its shim on PATH.
		"PATH="+filepath.Join(c.bins.dir, "bin")+":"+os.Getenv("PATH"))
	if err != nil {
		return err
	}
	if err := p.waitFor(ctx, "the CRI socket", func(ctx context.Context) error {
		rt, err := n.criRuntime(ctx)
		if err != nil {
			return err
		}
		_, err = rt.Version(ctx, "v1")
		return err
	}); err != nil {
		return err
	}
	// Registered after containerd's own stop, so it runs before it: every
	// pod goes while containerd can still tear down its network and mounts.
	c.cleanups = append(c.cleanups, n.removeAllPods)
	return nil
}

// removeAllPods stops and removes every pod sandbox through CRI. The
// kubelet is stopped by then, so nothing recreates them.
func (n *realNode) removeAllPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := n.criRuntime(ctx)
	if err != nil {
		return err
	}
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return fmt.Errorf("listing pods on the real node: %w", err)
	}
	var errs []error
	for _, p := range pods {
		if err := rt.StopPodSandbox(ctx, p.Id); err != nil {
			errs = append(errs, err)
		}
		if err := rt.RemovePodSandbox(ctx, p.Id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (n *realNode) criRuntime(ctx context.Context) (internalapi.RuntimeService, error) {
	return criclient.NewRemoteRuntimeService(ctx, "unix://"+n.CRISocket(), 5*time.Second, noop.NewTracerProvider(), false)
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	n := c.node
	serving, err := c.pki.serving("kubelet", []string{n.Name, "127.0.0.1", "localhost"})
	if err != nil {
		return err
	}
	kubeconfig, err := c.componentKubeconfig("kubelet", "system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kd := filepath.Join(n.Dir, "kubelet")
	if err := os.MkdirAll(kd, 0o755); err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization:
  mode: Webhook
tlsCertFile: %q
tlsPrivateKeyFile: %q
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: %s
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
serializeImagePulls: false
podLogsDir: %q
resolvConf: ""
# The test machine's disk may be nearly full; never evict test pods for it.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, ports[0], ports[1], c.pki.CAFile(), serving.Cert, serving.Key, n.CRISocket(), n.Cgroup, filepath.Join(n.Dir, "pod-logs"))
	configPath := filepath.Join(kd, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	p, err := c.run("kubelet", []string{
		"--config=" + configPath,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + filepath.Join(kd, "root"),
		"--hostname-override=" + n.Name,
		"--node-labels=sandbox-fleet.io/real-node=true",
		"--v=1",
	})
	if err != nil {
		return err
	}
	if err := p.waitFor(ctx, "healthz", httpOK(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]))); err != nil {
		return err
	}
	return p.waitFor(ctx, "node "+n.Name+" to be Ready", func(ctx context.Context) error {
		return c.nodeReady(ctx, n.Name)
	})
}

// nodeReady returns nil once node name reports Ready.
func (c *Cluster) nodeReady(ctx context.Context, name string) error {
	node, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s is not Ready", name)
}
