package images

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{in: "busybox", want: "docker.io/library/busybox:latest"},
		{in: "busybox:1.36", want: "docker.io/library/busybox:1.36"},
		{in: "swebench/sweb.eval.x86_64.django_1776_django-11099:latest", want: "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"},
		{in: "index.docker.io/library/ubuntu:22.04", want: "docker.io/library/ubuntu:22.04"},
		{in: "localhost/img", want: "localhost/img:latest"},
		{in: "localhost:5000/team/img:v1", want: "localhost:5000/team/img:v1"},
		{in: "ghcr.io/org/img@sha256:" + sha, want: "ghcr.io/org/img@sha256:" + sha},
		{in: "ghcr.io/org/img:v1@sha256:" + sha, want: "ghcr.io/org/img:v1@sha256:" + sha},
		{in: "Busybox:UPPER:case", err: `invalid image reference "Busybox:UPPER:case"`},
		{in: "", err: "invalid image reference"},
	} {
		got, err := Normalize(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Normalize(%q) = %q, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestNormalizeAll(t *testing.T) {
	got, err := NormalizeAll([]string{"busybox", "docker.io/library/busybox:latest", "Docker.io/swebench/a:v1", "ghcr.io/org/img:v1", "swebench/a:v1"})
	want := []string{"docker.io/library/busybox:latest", "docker.io/swebench/a:v1", "ghcr.io/org/img:v1"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("NormalizeAll = %q, %v; want %q", got, err, want)
	}
	if _, err := NormalizeAll([]string{"busybox", "Not:An:Image"}); err == nil || !strings.Contains(err.Error(), `"Not:An:Image"`) {
		t.Errorf("an invalid reference: %v, want an error naming it", err)
	}
}

func TestFamiliar(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"docker.io/library/busybox:latest", "busybox"},
		{"docker.io/library/busybox:1.36", "busybox:1.36"},
		{"docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest", "swebench/sweb.eval.x86_64.django_1776_django-11099"},
		{"index.docker.io/library/ubuntu:22.04", "ubuntu:22.04"},
		{"docker.io/library/busybox@sha256:" + sha, "busybox@sha256:" + sha},
		{"localhost:5000/team/img:v1", "localhost:5000/team/img:v1"},
		{"ghcr.io/org/img:latest", "ghcr.io/org/img"},
		{"Not A Reference", "Not A Reference"},
	} {
		got := Familiar(tt.in)
		if got != tt.want {
			t.Errorf("Familiar(%q) = %q, want %q", tt.in, got, tt.want)
		}
		// Normalize undoes it.
		if a, err := Normalize(tt.in); err == nil {
			if b, err := Normalize(got); err != nil || a != b {
				t.Errorf("Normalize(Familiar(%q)) = %q, %v; want %q", tt.in, b, err, a)
			}
		}
	}
}

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestRewrite(t *testing.T) {
	rules := []Rule{
		{From: "docker.io/swebench", To: "mirror.local/swe"},
		{From: "docker.io", To: "mirror.local/hub"},
		{From: "ghcr.io/org", To: "mirror.local/gh"},
	}
	for _, tt := range []struct {
		in, want  string
		rewritten bool
	}{
		{"busybox:1.36", "mirror.local/hub/library/busybox:1.36", true},
		{"swebench/sweb.eval.x86_64.a_1776_b-1:latest", "mirror.local/swe/sweb.eval.x86_64.a_1776_b-1:latest", true},
		{"ghcr.io/org/img@sha256:" + sha, "mirror.local/gh/img@sha256:" + sha, true},
		// A prefix only matches at a path boundary.
		{"ghcr.io/organisation/img:v1", "ghcr.io/organisation/img:v1", false},
		{"quay.io/x/y:z", "quay.io/x/y:z", false},
		// A host is a host whatever its case; the same host on another
		// port is another registry.
		{"Docker.io/busybox:1", "mirror.local/hub/library/busybox:1", true},
		{"docker.io:443/library/busybox:1", "docker.io:443/library/busybox:1", false},
	} {
		got, ok, err := Rewrite(rules, tt.in)
		if err != nil || got != tt.want || ok != tt.rewritten {
			t.Errorf("Rewrite(%q) = %q, %v, %v; want %q, %v", tt.in, got, ok, err, tt.want, tt.rewritten)
		}
	}
}

func TestParseRule(t *testing.T) {
	r, err := ParseRule("docker.io=mirror.local:5000/hub/")
	if err != nil || r != (Rule{From: "docker.io", To: "mirror.local:5000/hub"}) {
		t.Errorf("ParseRule = %+v, %v", r, err)
	}
	for _, bad := range []string{"docker.io", "=x", "x=", "docker.io=UPPER/Case"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) accepted", bad)
		}
	}
}

// WithinCase is a row of testdata/within.json, which the webhook's CEL
// call conditions are also tested against: one table for every path that
// judges registries.
type WithinCase struct {
	Image  string `json:"image"`
	Prefix string `json:"prefix"`
	Within bool   `json:"within"`
}

func TestWithin(t *testing.T) {
	data, err := os.ReadFile("testdata/within.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []WithinCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, tt := range cases {
		got, err := Within(tt.Image, tt.Prefix)
		if err != nil || got != tt.Within {
			t.Errorf("Within(%q, %q) = %v, %v; want %v", tt.Image, tt.Prefix, got, err, tt.Within)
		}
	}
}

func TestWithinAny(t *testing.T) {
	prefixes := []string{"mirror.example.com", "docker.io/swebench"}
	for _, tt := range []struct {
		image string
		want  bool
	}{
		{"mirror.example.com/hub/busybox:1", true},
		{"swebench/django:v1", true},
		{"mirror.example.com:5000/x:1", false},
		{"Not:An:Image", false},
	} {
		if got := WithinAny(tt.image, prefixes); got != tt.want {
			t.Errorf("WithinAny(%q) = %v, want %v", tt.image, got, tt.want)
		}
	}
	if WithinAny("mirror.example.com/x:1", nil) {
		t.Error("an image lies within no prefixes")
	}
}
