package webhook

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// TestNetworkPolicy: the NetworkPolicy a policy's spec.network makes
// selects the sandbox Pods, denies both ways, allows DNS unless turned
// off, and excepts the metadata endpoints from every egress ipBlock that
// holds them.
func TestNetworkPolicy(t *testing.T) {
	off := false
	mirrorPort := intstr.FromInt32(443)
	mirror := networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "mirrors"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Port: &mirrorPort}},
	}
	// As the API server stores it: a port's protocol defaults to TCP.
	mirrorTCP := *mirror.DeepCopy()
	mirrorTCP.Ports[0].Protocol = ptr(corev1.ProtocolTCP)
	block := func(cidr string, except ...string) networkingv1.NetworkPolicyEgressRule {
		return networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}}}
	}
	serve := networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "serve"}}}}}
	cases := []struct {
		name    string
		network *v1alpha1.NetworkIsolation
		egress  []networkingv1.NetworkPolicyEgressRule
		ingress []networkingv1.NetworkPolicyIngressRule
	}{
		{"nothing listed: DNS only", &v1alpha1.NetworkIsolation{}, []networkingv1.NetworkPolicyEgressRule{dnsRule()}, nil},
		{"DNS off: nothing", &v1alpha1.NetworkIsolation{DNS: &off}, nil, nil},
		{"a mirror by namespace, serve in", &v1alpha1.NetworkIsolation{Egress: []networkingv1.NetworkPolicyEgressRule{mirror}, Ingress: []networkingv1.NetworkPolicyIngressRule{serve}},
			[]networkingv1.NetworkPolicyEgressRule{dnsRule(), mirrorTCP}, []networkingv1.NetworkPolicyIngressRule{serve}},
		{"the internet, metadata excepted", &v1alpha1.NetworkIsolation{DNS: &off, Egress: []networkingv1.NetworkPolicyEgressRule{block("0.0.0.0/0", "10.0.0.0/8")}},
			[]networkingv1.NetworkPolicyEgressRule{block("0.0.0.0/0", "10.0.0.0/8", "169.254.169.254/32", "100.100.100.200/32")}, nil},
		{"link-local already excepted", &v1alpha1.NetworkIsolation{DNS: &off, Egress: []networkingv1.NetworkPolicyEgressRule{block("0.0.0.0/0", "169.254.0.0/16")}},
			[]networkingv1.NetworkPolicyEgressRule{block("0.0.0.0/0", "169.254.0.0/16", "100.100.100.200/32")}, nil},
		{"IPv6 everywhere", &v1alpha1.NetworkIsolation{DNS: &off, Egress: []networkingv1.NetworkPolicyEgressRule{block("::/0")}},
			[]networkingv1.NetworkPolicyEgressRule{block("::/0", "fd00:ec2::254/128")}, nil},
		{"a range without metadata", &v1alpha1.NetworkIsolation{DNS: &off, Egress: []networkingv1.NetworkPolicyEgressRule{block("192.0.2.0/24")}},
			[]networkingv1.NetworkPolicyEgressRule{block("192.0.2.0/24")}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rl", UID: "u1"}, Spec: v1alpha1.SandboxPolicySpec{Network: c.network}}
			before := p.DeepCopy()
			np := NetworkPolicy(p, "team-a")
			if np.Name != "sandbox-fleet-rl" || np.Namespace != "team-a" || np.Labels[NetworkIsolationLabel] != "true" {
				t.Errorf("metadata %+v", np.ObjectMeta)
			}
			if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != "u1" || np.OwnerReferences[0].Kind != "SandboxPolicy" {
				t.Errorf("owner %+v, want the SandboxPolicy", np.OwnerReferences)
			}
			want := networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: SandboxPodLabel, Operator: metav1.LabelSelectorOpExists}}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Egress:      c.egress, Ingress: c.ingress,
			}
			if d := cmp.Diff(want, np.Spec); d != "" {
				t.Errorf("spec (-want +got):\n%s", d)
			}
			if d := cmp.Diff(before, &p); d != "" {
				t.Errorf("NetworkPolicy changed the policy:\n%s", d)
			}
		})
	}
	if NetworkPolicy(v1alpha1.SandboxPolicy{}, "team-a") != nil {
		t.Error("a policy without spec.network made a NetworkPolicy")
	}
}

func TestNetworkPolicyName(t *testing.T) {
	long := strings.Repeat("a", 253)
	for _, c := range []struct{ policy, want string }{
		{"rl", "sandbox-fleet-rl"},
		{strings.Repeat("a", 239), "sandbox-fleet-" + strings.Repeat("a", 239)},
	} {
		if got := NetworkPolicyName(c.policy); got != c.want {
			t.Errorf("NetworkPolicyName(%q) = %q, want %q", c.policy, got, c.want)
		}
	}
	a, b := NetworkPolicyName(long), NetworkPolicyName(long[:252]+"b")
	if len(a) != 253 || len(b) != 253 || a == b {
		t.Errorf("long names: %d and %d characters, equal %v: want 253, told apart", len(a), len(b), a == b)
	}
	// Cut where a label ends: the name stays a DNS subdomain.
	dotted := strings.Repeat("a", 227) + "." + strings.Repeat("b", 30)
	if got := NetworkPolicyName(dotted); len(validation.IsDNS1123Subdomain(got)) > 0 || strings.Contains(got, ".-") {
		t.Errorf("NetworkPolicyName of a name cut at its dot = %q: %v", got, validation.IsDNS1123Subdomain(got))
	}
}

func TestCheckNetwork(t *testing.T) {
	egress := func(cidr string, except ...string) *v1alpha1.NetworkIsolation {
		return &v1alpha1.NetworkIsolation{Egress: []networkingv1.NetworkPolicyEgressRule{{}, {To: []networkingv1.NetworkPolicyPeer{{}, {IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}}}}}
	}
	ingress := &v1alpha1.NetworkIsolation{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "169.254.169.254/32"}}}}}}
	for _, c := range []struct {
		name    string
		network *v1alpha1.NetworkIsolation
		err     string
	}{
		{"unset", nil, ""},
		{"the internet", egress("0.0.0.0/0", "10.0.0.0/8"), ""},
		{"no CIDR", egress("10.0.0.0"), `spec.network.egress[1].to[1].ipBlock: cidr "10.0.0.0" is no CIDR`},
		{"except no CIDR", egress("10.0.0.0/8", "x"), `spec.network.egress[1].to[1].ipBlock: except "x" is no CIDR`},
		{"except outside", egress("10.0.0.0/8", "192.168.0.0/16"), `except "192.168.0.0/16" is not strictly inside cidr "10.0.0.0/8"`},
		{"except the whole", egress("10.0.0.0/8", "10.0.0.0/8"), `except "10.0.0.0/8" is not strictly inside`},
		{"except of the other family", egress("0.0.0.0/0", "::/1"), `except "::/1" is not strictly inside`},
		{"the metadata endpoint", egress("169.254.169.254/32"), `spec.network.egress[1].to[1].ipBlock: cidr "169.254.169.254/32" is the cloud metadata endpoint 169.254.169.254/32`},
		{"the IPv6 metadata endpoint", egress("fd00:ec2::254/128"), "is the cloud metadata endpoint fd00:ec2::254/128"},
		{"metadata as a source", ingress, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckNetwork(c.network)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("CheckNetwork = %v, want %q", err, c.err)
			}
		})
	}
}

// TestNetworkPolicies: one NetworkPolicy per policy with spec.network in
// each namespace it governs, none for a policy without.
func TestNetworkPolicies(t *testing.T) {
	isolated := &v1alpha1.NetworkIsolation{}
	policies := []v1alpha1.SandboxPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Spec: v1alpha1.SandboxPolicySpec{Network: isolated,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "everywhere"}, Spec: v1alpha1.SandboxPolicySpec{Network: isolated, Priority: 5}},
		{ObjectMeta: metav1.ObjectMeta{Name: "images-only"}, Spec: v1alpha1.SandboxPolicySpec{}},
	}
	nps, err := NetworkPolicies(policies, map[string]map[string]string{"b": nil, "a": {"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, np := range nps {
		got = append(got, np.Namespace+"/"+np.Name)
	}
	want := []string{"a/sandbox-fleet-everywhere", "a/sandbox-fleet-team-a", "b/sandbox-fleet-everywhere"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("NetworkPolicies (-want +got):\n%s", d)
	}
	bad := []v1alpha1.SandboxPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Near"}}}}}}
	if _, err := NetworkPolicies(bad, map[string]map[string]string{"a": nil}); err == nil || !strings.Contains(err.Error(), `SandboxPolicy "bad"`) {
		t.Errorf("a bad selector: %v, want an error naming the policy", err)
	}
}
