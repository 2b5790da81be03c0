package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The real node enforces NetworkPolicies as a cluster's network plugin
// does, with kube-router's network policy controller alone (no routing,
// no service proxy): per-Pod chains in the host's iptables filter table
// and ipsets of the Pods and CIDRs the policies name, for the Pods whose
// host IP is the node's. It sees traffic between Pods on the node's
// bridge through br_netfilter, and traffic to the host (the API server
// through apiServerRule) in INPUT.
//
// Its chains and sets are the host's, not the node's own: one real node
// with network policies per machine. kube-router v2.1.0's --cleanup-config
// removes nothing of them (its cleanup runs on handlers it never makes),
// so removeNetworkPolicyRules does.

// kubeRouterChainPrefixes are the prefixes of the chains kube-router's
// network policy controller makes; kubeRouterSetPrefixes of its ipsets
// (TMP- for the moment of an atomic swap).
var (
	kubeRouterChainPrefixes = []string{"KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-"}
	kubeRouterSetPrefixes   = []string{"KUBE-SRC-", "KUBE-DST-", "TMP-"}
)

// kubeRouterUser is who the enforcer is to the API server: it reads Pods,
// namespaces, nodes and NetworkPolicies, and its informers also list
// Services and their endpoints.
const kubeRouterUser = "system:kube-router"

// startNetworkPolicies runs kube-router's network policy controller for
// the real node and waits for its chains.
func (c *Cluster) startNetworkPolicies(ctx context.Context) error {
	n := c.node
	if chains, _ := kubeRouterChains(); len(chains) > 0 {
		return fmt.Errorf("kube-router's chains (%s) are in this machine's iptables: another test cluster's real node enforces NetworkPolicies here, and one per machine can; stop it (go run ./hack/localcluster -dir DIR down), or, if none runs, remove them: go run ./hack/localcluster unfence",
			strings.Join(chains, ", "))
	}
	if err := c.grantKubeRouter(ctx); err != nil {
		return err
	}
	kubeconfig, err := c.componentKubeconfig("kube-router", kubeRouterUser)
	if err != nil {
		return err
	}
	n.NetworkPolicies = true
	p, err := c.run("kube-router", []string{
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + n.Name,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
		// No listener: this machine's servers are the tests' own.
		"--health-port=0", "--metrics-port=0",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--service-node-port-range=" + nodePortRange,
		"--v=1",
	})
	if err != nil {
		return err
	}
	return p.waitFor(ctx, "kube-router's chains", func(context.Context) error {
		return exec.Command("iptables", "-S", "KUBE-ROUTER-FORWARD").Run()
	})
}

// grantKubeRouter lets kubeRouterUser read what kube-router follows.
func (c *Cluster) grantKubeRouter(ctx context.Context) error {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-cluster:kube-router"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "namespaces", "nodes", "services", "endpoints"}, Verbs: read},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: read},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: kubeRouterUser}}}
	if _, err := c.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("granting kube-router its reads: %w", err)
	}
	if _, err := c.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("granting kube-router its reads: %w", err)
	}
	return nil
}

// removeNetworkPolicyRules deletes, once kube-router is stopped, the
// jumps to its chains from the built-in ones, its chains, and its ipsets.
func (n *realNode) removeNetworkPolicyRules() error {
	if !n.NetworkPolicies {
		return nil
	}
	return RemoveKubeRouterRules()
}

// RemoveKubeRouterRules deletes kube-router's network policy rules and
// ipsets from this machine: what a test cluster's real node left when
// its run died before cleaning up.
func RemoveKubeRouterRules() error {
	var errs []error
	for _, builtin := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		rules, err := iptablesRules(builtin)
		if err != nil {
			return err
		}
		// By number, last first, so that the numbers left stay right.
		for i := len(rules) - 1; i >= 0; i-- {
			if kubeRouterName(jumpTarget(rules[i]), kubeRouterChainPrefixes) {
				errs = append(errs, iptables("-D", builtin, strconv.Itoa(i+1)))
			}
		}
	}
	chains, err := kubeRouterChains()
	if err != nil {
		return err
	}
	// Every chain emptied before any is deleted: they jump to each other.
	for _, chain := range chains {
		errs = append(errs, iptables("-F", chain))
	}
	for _, chain := range chains {
		errs = append(errs, iptables("-X", chain))
	}
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing ipsets: %w", err))...)
	}
	for _, set := range strings.Fields(string(out)) {
		if kubeRouterName(strings.TrimPrefix(set, "inet6:"), kubeRouterSetPrefixes) {
			if out, err := exec.Command("ipset", "destroy", set).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ipset destroy %s: %v: %s", set, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// kubeRouterChains are the filter table's chains kube-router made.
func kubeRouterChains() ([]string, error) {
	out, err := exec.Command("iptables", "-S").Output()
	if err != nil {
		return nil, fmt.Errorf("listing iptables chains: %w", err)
	}
	var chains []string
	for _, line := range strings.Split(string(out), "\n") {
		if chain, ok := strings.CutPrefix(line, "-N "); ok && kubeRouterName(chain, kubeRouterChainPrefixes) {
			chains = append(chains, chain)
		}
	}
	return chains, nil
}

// iptablesRules are chain's rules in order, as iptables -S prints them.
func iptablesRules(chain string) ([]string, error) {
	out, err := exec.Command("iptables", "-S", chain).Output()
	if err != nil {
		return nil, fmt.Errorf("listing iptables chain %s: %w", chain, err)
	}
	var rules []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "-A ") {
			rules = append(rules, line)
		}
	}
	return rules, nil
}

// jumpTarget is the chain a rule jumps to, "" for none.
func jumpTarget(rule string) string {
	fields := strings.Fields(rule)
	if i := slices.Index(fields, "-j"); i >= 0 && i+1 < len(fields) {
		return fields[i+1]
	}
	return ""
}

func kubeRouterName(name string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

func iptables(args ...string) error {
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
