package main

import "testing"

func TestKindOf(t *testing.T) {
	for _, tt := range []struct{ method, path, want string }{
		{"POST", "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/bench/sandboxclaims", "POST sandboxclaims"},
		{"DELETE", "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/bench/sandboxclaims/t1-abc", "DELETE sandboxclaims"},
		{"DELETE", "/api/v1/namespaces/bench/pods/pool-x-1", "DELETE pods"},
		{"PATCH", "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/bench/sandboxwarmpools/pool-x/status", "PATCH sandboxwarmpools/status"},
		{"GET", "/api/v1/namespaces/bench", "GET namespaces"},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "POST selfsubjectaccessreviews"},
		{"GET", "/api/v1/nodes", "GET nodes"},
		{"GET", "/version", "GET /version"},
		{"GET", "/apis/coordination.k8s.io/v1", "GET /apis/coordination.k8s.io/v1"},
	} {
		if got := kindOf(tt.method, tt.path); got != tt.want {
			t.Errorf("kindOf(%s %s) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}
