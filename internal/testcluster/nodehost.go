package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cleanHost undoes the node's changes to the host once its processes are
// gone: mounts first (they pin the network namespaces and cgroups), then the
// bridge, cgroups, the host paths it created, and the sysctls.
func (n *realNode) cleanHost() error {
	var errs []error
	for _, undo := range []func() error{n.unmountAll, n.removeNetworkPolicyRules, n.removeAPIServerRoute, n.removeNetwork, n.removeCgroups, n.removeHostPaths, n.restoreSysctls} {
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
	if n.NetworkPolicies {
		if chains, err := kubeRouterChains(); err != nil || len(chains) > 0 {
			left = append(left, fmt.Sprintf("kube-router's iptables chains %v (%v)", chains, err))
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
	for pid, exe := range n.processes(binDir) {
		left = append(left, fmt.Sprintf("process %d %s", pid, exe))
	}
	return left
}

// processes are the node's own processes (binDir is where its binaries
// are), by PID: other clusters run from the same binaries, but only this
// node's name its directory on their command lines.
func (n *realNode) processes(binDir string) map[int]string {
	found := map[int]string{}
	exes, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, exe := range exes {
		target, err := os.Readlink(exe)
		if err != nil || !strings.HasPrefix(target, binDir+"/") {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), n.Dir) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(exe)))
			found[pid] = target
		}
	}
	return found
}

// killRemaining kills what is left of the node's pods once containerd is
// gone: the processes in its cgroup (the containers) and its shims.
func (n *realNode) killRemaining(binDir string) error {
	dirs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	pids := n.processes(binDir)
	for _, d := range dirs {
		_ = filepath.WalkDir(filepath.Join(d, n.Cgroup), func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids[pid] = "in cgroup " + filepath.Dir(p)
				}
			}
			return nil
		})
	}
	var errs []error
	for pid, what := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing %d (%s): %w", pid, what, err))
		}
	}
	return errors.Join(errs...)
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
