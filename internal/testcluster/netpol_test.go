package testcluster

import "testing"

// TestKubeRouterRules: what RemoveKubeRouterRules takes for kube-router's
// is its chains' and sets' names, and the jumps to them, as iptables -S
// prints them; the node's own rule and other chains' are left alone.
func TestKubeRouterRules(t *testing.T) {
	for _, tt := range []struct {
		rule string
		ours bool
	}{
		{`-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD`, true},
		{`-A INPUT -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-INPUT`, true},
		{`-A FORWARD -j CNI-FORWARD`, false},
		{`-A PREROUTING -i sf-abc -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 127.0.0.1:6443`, false},
		{`-A FORWARD -m comment --comment "-j KUBE-ROUTER-FORWARD"`, false},
	} {
		if got := kubeRouterName(jumpTarget(tt.rule), kubeRouterChainPrefixes); got != tt.ours {
			t.Errorf("%s: kube-router's %v, want %v", tt.rule, got, tt.ours)
		}
	}
	for _, tt := range []struct {
		set  string
		ours bool
	}{{"KUBE-SRC-TJ2JN25BO24O3UDW", true}, {"KUBE-DST-KGOYFYRFJXHKC3UU", true}, {"TMP-ABCDEFGHIJKLMNOP", true}, {"my-set", false}} {
		if got := kubeRouterName(tt.set, kubeRouterSetPrefixes); got != tt.ours {
			t.Errorf("ipset %s: kube-router's %v, want %v", tt.set, got, tt.ours)
		}
	}
}
