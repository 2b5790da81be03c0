package preflight

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestControllerVersion(t *testing.T) {
	deployment := func(images ...string) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		for i, img := range images {
			name := ControllerName
			if i > 0 {
				name = "sidecar"
			}
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: name, Image: img})
		}
		return d
	}
	for _, tt := range []struct {
		name          string
		dep           *appsv1.Deployment
		served        []string
		version, line string
		older         bool
	}{
		{"release image", deployment("registry.k8s.io/agent-sandbox/agent-sandbox-controller:v1.0.1"), []string{"v1beta1"}, "v1.0.1", "v1.0", false},
		{"image with a digest", deployment("registry.k8s.io/agent-sandbox/agent-sandbox-controller:v0.5.6@sha256:abc"), nil, "v0.5.6", "v0.5", false},
		{"registry with a port", deployment("localhost:5000/agent-sandbox-controller:v1.0.9"), nil, "v1.0.9", "v1.0", false},
		{"the controller among sidecars", deployment("example.com/c:v0.3.0", "example.com/proxy:v9.9.9"), nil, "v0.3.0", "v0.3", true},
		{"older patch", deployment("example.com/c:v0.5.2"), nil, "v0.5.2", "v0.5", true},
		{"no tag: from the API versions", deployment("example.com/c"), []string{"v1alpha1", "v1beta1"}, "", "v0.x", false},
		{"a tag that is no version", deployment("example.com/c:latest"), []string{"v1beta1"}, "", "v1.x", false},
		{"no Deployment, v1.0 API", nil, []string{"v1beta1"}, "", "v1.x", false},
		{"nothing known", nil, nil, "", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := controllerVersion(tt.dep, tt.served)
			if v.Version != tt.version || v.Line != tt.line {
				t.Errorf("version %q line %q, want %q %q", v.Version, v.Line, tt.version, tt.line)
			}
			warn := OlderThanTested(v)
			if (warn != "") != tt.older {
				t.Errorf("older than tested: %q, want older %v", warn, tt.older)
			}
			check := checkControllerVersion(v)
			if want := map[bool]Status{true: Warn, false: Pass}[tt.older || tt.line == ""]; check.Status != want {
				t.Errorf("check %s %q, want %s", check.Status, check.Detail, want)
			}
			if tt.older && !strings.Contains(warn, TestedAgentSandbox[0]) {
				t.Errorf("the warning %q does not name the oldest tested release", warn)
			}
		})
	}
}
