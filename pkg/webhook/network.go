package webhook

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// NetworkIsolationLabel marks the NetworkPolicies asrl-webhook writes for
// SandboxPolicies' spec.network; each is owned by its SandboxPolicy.
const NetworkIsolationLabel = "sandbox-fleet.io/network-isolation"

// MetadataEndpoints are the cloud providers' instance metadata addresses
// (AWS, GCP and Azure on 169.254.169.254, AWS over IPv6, Alibaba Cloud),
// which hand out the node's credentials: every ipBlock a sandbox may
// reach excepts those inside it.
var MetadataEndpoints = []string{"169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32"}

// NetworkPolicyName is the NetworkPolicy that carries the network
// isolation of the SandboxPolicy named policy: "sandbox-fleet-" and the
// name, cut and told apart by a hash where that would pass the 253
// characters a name may have.
func NetworkPolicyName(policy string) string {
	const prefix, most = "sandbox-fleet-", 253
	name := prefix + policy
	if len(name) <= most {
		return name
	}
	sum := sha256.Sum256([]byte(policy))
	tail := "-" + hex.EncodeToString(sum[:])[:10]
	// A DNS label may neither end nor start with a dash: no "." or "-"
	// before the tail's dash.
	return strings.TrimRight(name[:most-len(tail)], ".-") + tail
}

// NetworkPolicy is the NetworkPolicy that fences the sandbox Pods of
// namespace off the network under p's spec.network: it selects the Pods
// labelled SandboxPodLabel, denies every connection in and out, and
// allows what the policy lists — DNS unless turned off, its egress with
// the metadata endpoints excepted, and its ingress. It is nil when p
// sets no network isolation.
func NetworkPolicy(p v1alpha1.SandboxPolicy, namespace string) *networkingv1.NetworkPolicy {
	n := p.Spec.Network
	if n == nil {
		return nil
	}
	var egress []networkingv1.NetworkPolicyEgressRule
	if n.DNS == nil || *n.DNS {
		egress = append(egress, dnsRule())
	}
	for _, rule := range n.Egress {
		rule = *rule.DeepCopy()
		for i := range rule.To {
			if b := rule.To[i].IPBlock; b != nil {
				b.Except = exceptMetadata(b.CIDR, b.Except)
			}
		}
		defaultProtocols(rule.Ports)
		egress = append(egress, rule)
	}
	var ingress []networkingv1.NetworkPolicyIngressRule
	for _, rule := range n.Ingress {
		rule = *rule.DeepCopy()
		defaultProtocols(rule.Ports)
		ingress = append(ingress, rule)
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name: NetworkPolicyName(p.Name), Namespace: namespace,
			Labels: map[string]string{NetworkIsolationLabel: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SandboxPolicy", Name: p.Name, UID: p.UID,
				Controller: ptr(true)}},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: SandboxPodLabel, Operator: metav1.LabelSelectorOpExists}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     ingress,
			Egress:      egress,
		},
	}
}

// NetworkPolicies are the NetworkPolicies the policies call for in the
// namespaces, given by name with their labels: one per policy with
// spec.network in each namespace it governs, ordered by namespace, then
// name. The NetworkPolicies selecting a Pod add up, so where several
// policies govern a namespace a sandbox may reach what any of them
// allows.
func NetworkPolicies(policies []v1alpha1.SandboxPolicy, namespaces map[string]map[string]string) ([]networkingv1.NetworkPolicy, error) {
	var out []networkingv1.NetworkPolicy
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		set, err := Select(policies, namespaces[ns])
		if err != nil {
			return nil, err
		}
		for _, p := range set {
			if np := NetworkPolicy(p, ns); np != nil {
				out = append(out, *np)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b networkingv1.NetworkPolicy) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// defaultProtocols sets TCP where a port names no protocol, as the API
// server does: the NetworkPolicy written then equals the one stored.
func defaultProtocols(ports []networkingv1.NetworkPolicyPort) {
	for i := range ports {
		if ports[i].Protocol == nil {
			ports[i].Protocol = ptr(corev1.ProtocolTCP)
		}
	}
}

// dnsRule allows the cluster's DNS: kube-system's Pods labelled
// k8s-app=kube-dns (CoreDNS keeps the label kube-dns had), on port 53.
func dnsRule() networkingv1.NetworkPolicyEgressRule {
	port := intstr.FromInt32(53)
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr(corev1.ProtocolUDP), Port: &port}, {Protocol: ptr(corev1.ProtocolTCP), Port: &port}},
	}
}

// exceptMetadata adds to except each metadata endpoint inside cidr that
// it leaves allowed. A CIDR that does not parse is left as it is: the API
// server refuses the NetworkPolicy, and the policy's admission (check
// NetworkIsolationErrors) refuses the policy before.
func exceptMetadata(cidr string, except []string) []string {
	block, err := netip.ParsePrefix(cidr)
	if err != nil {
		return except
	}
	out := slices.Clone(except)
	for _, m := range MetadataEndpoints {
		endpoint := netip.MustParsePrefix(m)
		if !block.Contains(endpoint.Addr()) || excepted(endpoint.Addr(), except) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// excepted reports whether addr is inside one of the CIDRs of except.
func excepted(addr netip.Addr, except []string) bool {
	for _, e := range except {
		if p, err := netip.ParsePrefix(e); err == nil && p.Contains(addr) {
			return true
		}
	}
	return false
}

// CheckNetwork finds what in a policy's spec.network the API server would
// refuse in the NetworkPolicy it makes, or what would let a sandbox reach
// a metadata endpoint: an ipBlock whose CIDR or except does not parse,
// an except not strictly inside its CIDR, or a CIDR that is all metadata
// endpoint. The error names the field.
func CheckNetwork(n *v1alpha1.NetworkIsolation) error {
	if n == nil {
		return nil
	}
	for i, rule := range n.Egress {
		for j, peer := range rule.To {
			if err := checkIPBlock(peer.IPBlock, true); err != nil {
				return fmt.Errorf("spec.network.egress[%d].to[%d].ipBlock: %w", i, j, err)
			}
		}
	}
	for i, rule := range n.Ingress {
		for j, peer := range rule.From {
			if err := checkIPBlock(peer.IPBlock, false); err != nil {
				return fmt.Errorf("spec.network.ingress[%d].from[%d].ipBlock: %w", i, j, err)
			}
		}
	}
	return nil
}

func checkIPBlock(b *networkingv1.IPBlock, egress bool) error {
	if b == nil {
		return nil
	}
	block, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return fmt.Errorf("cidr %q is no CIDR (%v): write it as 10.0.0.0/8 or fd00::/8", b.CIDR, err)
	}
	for _, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return fmt.Errorf("except %q is no CIDR (%v)", e, err)
		}
		if p.Addr().Is4() != block.Addr().Is4() || p.Bits() <= block.Bits() || !block.Contains(p.Addr()) {
			return fmt.Errorf("except %q is not strictly inside cidr %q, as a NetworkPolicy requires", e, b.CIDR)
		}
	}
	if !egress {
		return nil
	}
	for _, m := range MetadataEndpoints {
		endpoint := netip.MustParsePrefix(m)
		if endpoint.Addr().Is4() == block.Addr().Is4() && block.Bits() >= endpoint.Bits() && endpoint.Contains(block.Addr()) {
			return fmt.Errorf("cidr %q is the cloud metadata endpoint %s, which sandboxes may never reach", b.CIDR, m)
		}
	}
	return nil
}

// fencing is the first policy of set with spec.network, "" for none.
func (s Set) fencing() string {
	for _, p := range s {
		if p.Spec.Network != nil {
			return p.Name
		}
	}
	return ""
}

// templateNetworkField is where a SandboxTemplate says whether Agent
// Sandbox writes a NetworkPolicy of its own for the template's sandboxes.
const templateNetworkField = "spec.networkPolicyManagement"

// MutateTemplateNetwork leaves a SandboxTemplate's networking to the
// policies when one of set fences sandboxes off the network: Agent
// Sandbox writes a NetworkPolicy of the template's unless it is
// Unmanaged, and the NetworkPolicies selecting a Pod add up, so the
// template's would open what the fence closes. It returns the change
// made, "" for none.
func MutateTemplateNetwork(spec *extensionsv1beta1.SandboxTemplateSpec, set Set) string {
	fence := set.fencing()
	if fence == "" || spec.NetworkPolicyManagement == extensionsv1beta1.NetworkPolicyManagementUnmanaged {
		return ""
	}
	spec.NetworkPolicyManagement = extensionsv1beta1.NetworkPolicyManagementUnmanaged
	return fmt.Sprintf("%s: Unmanaged (SandboxPolicy %q fences the sandboxes)", templateNetworkField, fence)
}

// CheckTemplateNetwork denies a SandboxTemplate whose sandboxes Agent
// Sandbox would give a NetworkPolicy of their own when a policy of set
// fences them (MutateTemplateNetwork says why).
func CheckTemplateNetwork(spec *extensionsv1beta1.SandboxTemplateSpec, set Set) *Denial {
	fence := set.fencing()
	if fence == "" || spec.NetworkPolicyManagement == extensionsv1beta1.NetworkPolicyManagementUnmanaged {
		return nil
	}
	return &Denial{Policies: []string{fence}, Field: templateNetworkField,
		Reason: "must be Unmanaged: the policy fences the namespace's sandboxes off the network, and a NetworkPolicy of the template's own would open what the fence closes"}
}
