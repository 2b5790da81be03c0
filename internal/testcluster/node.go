package testcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
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
// It is saved with a detached cluster's state, so that StopDetached can undo
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
	c.cleanups = append(c.cleanups, n.cleanHost)
	if err := n.createCgroups(); err != nil {
		return err
	}
	if err := n.routeToAPIServer(); err != nil {
		return err
	}
	if err := c.startContainerd(ctx); err != nil {
		return err
	}
	return c.startKubelet(ctx)
}

func (c *Cluster) startRegistry(ctx context.Context) error {
	addr, err := registryAddr()
	if err != nil {
		return err
	}
	c.node.Registry = addr
	p, err := c.run("registry", registryArgs(addr, filepath.Join(c.node.Dir, "registry")))
	if err != nil {
		return err
	}
	return registryServes(ctx, p, addr)
}

// StartRegistry starts the test registry of the test binaries (`make
// testbin`) on a free loopback port, with its blobs and log in dir, for a
// program that needs it without a cluster of this package (e2e/kind), and
// returns its host:port once it serves. Like the cluster's components it
// dies with this process; Stop stops it before.
func StartRegistry(ctx context.Context, dir string) (string, *Process, error) {
	bins, err := findBinaries()
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	addr, err := registryAddr()
	if err != nil {
		return "", nil, err
	}
	p, err := startProcess("registry", bins.bin("registry"), registryArgs(addr, filepath.Join(dir, "blobs")), nil, dir, false, nil)
	if err != nil {
		return "", nil, err
	}
	if err := registryServes(ctx, p, addr); err != nil {
		return "", nil, errors.Join(err, p.Stop())
	}
	return addr, p, nil
}

func registryAddr() (string, error) {
	port, err := freePort()
	return "127.0.0.1:" + strconv.Itoa(port), err
}

func registryArgs(addr, blobs string) []string {
	return []string{"--addr=" + addr, "--blobs=" + blobs}
}

func registryServes(ctx context.Context, p *Process, addr string) error {
	return p.waitFor(ctx, "healthz", httpOK(http.DefaultClient, "http://"+addr+"/healthz"))
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

// cleanHost undoes the node's changes to the host once its processes are
// gone: mounts first (they pin the network namespaces and cgroups), then the
// bridge, cgroups, the host paths it created, and the sysctls.
func (n *realNode) cleanHost() error {
	var errs []error
	for _, undo := range []func() error{n.unmountAll, n.removeAPIServerRoute, n.removeNetwork, n.removeCgroups, n.removeHostPaths, n.restoreSysctls} {
		errs = append(errs, undo())
	}
	return errors.Join(errs...)
}

func (n *realNode) removeHostPaths() error {
	var errs []error
	for _, p := range n.NewHostPaths {
		errs = append(errs, os.RemoveAll(p))
	}
	return errors.Join(errs...)
}

// leftovers lists what the node left on the host after its cleanups ran
// (binDir is where its binaries are):
// mounts, cgroups, the bridge, changed sysctls, host paths it created and
// processes of its binaries (such as containerd's shims, which outlive
// containerd by design).
func (n *realNode) leftovers(binDir string) []string {
	var left []string
	if mounts, err := mountsUnder(n.Dir); err != nil || len(mounts) > 0 {
		left = append(left, fmt.Sprintf("mounts %v (%v)", mounts, err))
	}
	if dirs, err := cgroupHierarchies(); err == nil {
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, n.Cgroup)); err == nil {
				left = append(left, "cgroup "+filepath.Join(d, n.Cgroup))
			}
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.Bridge)); err == nil {
		left = append(left, "network link "+n.Bridge)
	}
	// The node adds one rule (apiServerRule) and no others (no
	// masquerade, no kubelet util chains); a rule naming its bridge or
	// subnet after the cleanups would be a regression.
	if rules, err := exec.Command("iptables-save").Output(); err == nil {
		for _, line := range strings.Split(string(rules), "\n") {
			if strings.Contains(line, n.Bridge) || strings.Contains(line, strings.TrimSuffix(n.Subnet, ".0/24")+".") {
				left = append(left, "iptables rule "+line)
			}
		}
	}
	for k, v := range n.Sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err != nil || strings.TrimSpace(string(b)) != v {
			left = append(left, fmt.Sprintf("sysctl %s = %q, was %q", k, strings.TrimSpace(string(b)), v))
		}
	}
	for _, p := range n.NewHostPaths {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, "path "+p)
		}
	}
	// Other clusters run from the same binaries; the node's own processes
	// name its directory on their command lines.
	exes, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, exe := range exes {
		target, err := os.Readlink(exe)
		if err != nil || !strings.HasPrefix(target, binDir+"/") {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), n.Dir) {
			left = append(left, "process "+filepath.Base(filepath.Dir(exe))+" "+target)
		}
	}
	return left
}

func (n *realNode) recordSysctls() error {
	for _, k := range nodeSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return err
		}
		n.Sysctls[k] = strings.TrimSpace(string(b))
	}
	return nil
}

func (n *realNode) restoreSysctls() error {
	var errs []error
	for k, v := range n.Sysctls {
		errs = append(errs, os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644))
	}
	return errors.Join(errs...)
}

// cgroupHierarchies lists the mounted cgroup hierarchies: the v1
// controllers and, on a hybrid host, the unified one.
func cgroupHierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		p := filepath.Join(cgroupRoot, e.Name())
		// Skip the symlinks that join co-mounted controllers (cpu -> cpu,cpuacct).
		if e.Type()&os.ModeSymlink != 0 || !e.IsDir() {
			continue
		}
		dirs = append(dirs, p)
	}
	return dirs, nil
}

// createCgroups makes the kubelet's cgroupRoot in every hierarchy, as the
// kubelet requires on cgroup v1; cpuset needs its CPUs and memory nodes
// copied from its parent before anything can join it.
func (n *realNode) createCgroups() error {
	dirs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, d := range dirs {
		p := filepath.Join(d, n.Cgroup)
		if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("creating cgroup %s: %w", p, err)
		}
		if filepath.Base(d) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(d, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(p, f), b, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// removeCgroups removes the cgroupRoot and everything the kubelet made in
// it, deepest first; a cgroup can only be removed once it is empty.
func (n *realNode) removeCgroups() error {
	dirs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		root := filepath.Join(d, n.Cgroup)
		var all []string
		_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			if err := rmdirRetry(all[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes an empty cgroup, waiting briefly for exiting
// processes to leave it.
func rmdirRetry(p string) error {
	var err error
	for range 50 {
		if err = os.Remove(p); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", p, err)
}

func (n *realNode) writeCNIConfig() (string, error) {
	dir := filepath.Join(n.Dir, "cni", "net.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %[1]q,
  "plugins": [{
    "type": "bridge",
    "bridge": %[1]q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %[2]q}]], "dataDir": %[3]q,
      "routes": [{"dst": %[4]q}]}
  }]
}
`, n.Bridge, n.Subnet, filepath.Join(n.Dir, "cni", "ipam"), serviceCIDR)
	return dir, os.WriteFile(filepath.Join(dir, "10-sandbox-fleet.conflist"), []byte(conf), 0o644)
}

// serviceCIDR is the API server's --service-cluster-ip-range, which pods
// route to through the bridge (and nowhere else off their subnet); the
// kubernetes Service's ClusterIP is its first address.
const (
	serviceCIDR         = "10.96.0.0/16"
	kubernetesServiceIP = "10.96.0.1"
)

// apiServerRule is the nat rule by which pods reach the API server the way
// in-cluster clients do, at the kubernetes Service (443): kube-proxy
// cannot route it, since the API server listens on loopback only and
// loopback cannot be a Service endpoint; the rule sends the Service's
// traffic from the pod bridge to the API server's loopback address, which
// the bridge's route_localnet lets through.
func (n *realNode) apiServerRule(op string) []string {
	return []string{"-t", "nat", op, "PREROUTING", "-i", n.Bridge, "-d", kubernetesServiceIP + "/32", "-p", "tcp", "--dport", "443",
		"-j", "DNAT", "--to-destination", n.APIServer}
}

// routeToAPIServer makes the pod bridge — before the CNI plugin would,
// which then uses it — lets it route to loopback, and adds apiServerRule.
func (n *realNode) routeToAPIServer() error {
	if out, err := exec.Command("ip", "link", "add", "name", n.Bridge, "type", "bridge").CombinedOutput(); err != nil {
		return fmt.Errorf("making the pod bridge %s: %v: %s", n.Bridge, err, out)
	}
	if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", n.Bridge, "route_localnet"), []byte("1"), 0o644); err != nil {
		return fmt.Errorf("letting bridge %s route to loopback: %w", n.Bridge, err)
	}
	if out, err := exec.Command("iptables", n.apiServerRule("-A")...).CombinedOutput(); err != nil {
		return fmt.Errorf("routing the kubernetes Service to the API server: iptables: %v: %s", err, out)
	}
	return nil
}

// removeAPIServerRoute deletes apiServerRule, if it is there.
func (n *realNode) removeAPIServerRoute() error {
	if n.APIServer == "" || exec.Command("iptables", n.apiServerRule("-C")...).Run() != nil {
		return nil
	}
	if out, err := exec.Command("iptables", n.apiServerRule("-D")...).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting the kubernetes Service's route: iptables: %v: %s", err, out)
	}
	return nil
}

// removeNetwork deletes the pod bridge and what libcni cached about it.
func (n *realNode) removeNetwork() error {
	var errs []error
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.Bridge)); err == nil {
		if out, err := exec.Command("ip", "link", "delete", n.Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %v: %s", n.Bridge, err, out))
		}
	}
	cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", n.Bridge+"-*"))
	for _, f := range cached {
		errs = append(errs, os.Remove(f))
	}
	return errors.Join(errs...)
}

// unmountAll unmounts everything mounted under the node's directory
// (volumes, container roots, network namespaces), deepest first.
func (n *realNode) unmountAll() error {
	mounts, err := mountsUnder(n.Dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unmount(mounts[i]); err != nil {
			errs = append(errs, err)
		}
	}
	// The kubelet links container logs from a fixed directory.
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if t, err := os.Readlink(l); err == nil && strings.HasPrefix(t, n.Dir+"/") {
			errs = append(errs, os.Remove(l))
		}
	}
	return errors.Join(errs...)
}

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
