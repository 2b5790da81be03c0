package nodecache

import (
	"strings"
	"testing"
)

func TestPullLimits(t *testing.T) {
	l := PullLimits{AllowedRegistries: []string{"docker.io/swebench", "registry.k8s.io"}, MaxHighWaterPercent: 85}
	for _, tt := range []struct {
		image, refusal string
	}{
		{"docker.io/swebench/sweb.eval.x86_64.django__django-11099:latest", ""},
		{"swebench/sweb.eval.x86_64.astropy__astropy-12907:latest", ""},
		{"registry.k8s.io/pause:3.10", ""},
		{"docker.io/swebenchx/a:1", "is from none of the registries"},
		{"busybox:1.36", "busybox:1.36 is from none of the registries this node's asrl-prepull-agent may pull from (docker.io/swebench, registry.k8s.io"},
		{"private.example.com/team/model:1", "is from none"},
		{"::bad::", "is from none"},
	} {
		got := l.Refusal(tt.image)
		if tt.refusal == "" && got != "" || tt.refusal != "" && !strings.Contains(got, tt.refusal) {
			t.Errorf("Refusal(%q) = %q, want %q", tt.image, got, tt.refusal)
		}
	}
	if got := (PullLimits{}).Refusal("docker.io/library/busybox:1.36"); !strings.Contains(got, "pulls from no registry") {
		t.Errorf("no allowed registries: %q", got)
	}
	for _, tt := range []struct{ max, want, got int32 }{{85, 80, 80}, {85, 100, 85}, {0, 100, 100}} {
		if got := (PullLimits{MaxHighWaterPercent: tt.max}).HighWater(tt.want); got != tt.got {
			t.Errorf("cap %d: HighWater(%d) = %d, want %d", tt.max, tt.want, got, tt.got)
		}
	}
}

func TestParseRegistries(t *testing.T) {
	got, err := ParseRegistries(" docker.io/swebench/, registry.k8s.io,,")
	if err != nil || strings.Join(got, " ") != "docker.io/swebench registry.k8s.io" {
		t.Errorf("ParseRegistries = %q, %v", got, err)
	}
	if _, err := ParseRegistries("docker.io,Bad Host"); err == nil || !strings.Contains(err.Error(), `"Bad Host" is not a registry`) {
		t.Errorf("a bad registry: %v", err)
	}
}
