package nodecachelocality

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

func TestDecodeArgs(t *testing.T) {
	for _, tt := range []struct {
		name    string
		obj     runtime.Object
		want    []string
		wantErr string
	}{
		{"no args: no registry read", nil, nil, ""},
		{"empty args", &runtime.Unknown{Raw: []byte(`{}`)}, nil, ""},
		{"registries and prefixes", &runtime.Unknown{Raw: []byte(`{"allowedRegistries":["mirror.example.com","docker.io/swebench"]}`)},
			[]string{"mirror.example.com", "docker.io/swebench"}, ""},
		{"with apiVersion and kind", &runtime.Unknown{Raw: []byte(`{"apiVersion":"v1","kind":"NodeCacheLocalityArgs","allowedRegistries":["ghcr.io"]}`)}, []string{"ghcr.io"}, ""},
		{"a misspelt field", &runtime.Unknown{Raw: []byte(`{"allowedRegistry":["ghcr.io"]}`)}, nil, `unknown field "allowedRegistry"`},
		{"not a registry", &runtime.Unknown{Raw: []byte(`{"allowedRegistries":["ghcr.io","Not A Registry"]}`)}, nil, `allowedRegistries[1]: "Not A Registry"`},
		{"two in one", &runtime.Unknown{Raw: []byte(`{"allowedRegistries":["ghcr.io,quay.io"]}`)}, nil, `allowedRegistries[0]: "ghcr.io,quay.io" is not one registry`},
		{"an empty prefix", &runtime.Unknown{Raw: []byte(`{"allowedRegistries":[""]}`)}, nil, `allowedRegistries[0]: "" is not one registry`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args, err := DecodeArgs(tt.obj)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), Name) {
					t.Errorf("error %v, want one naming %s and saying %s", err, Name, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(args.AllowedRegistries, tt.want) {
				t.Errorf("allowed registries %q (%v), want %q", args.AllowedRegistries, err, tt.want)
			}
		})
	}
}

// The plugin asks the registry only of images within the allowed
// prefixes: a Pod naming another host, a private address among them, has
// it read nothing.
func TestAllowedOnly(t *testing.T) {
	layers := []v1alpha1.Layer{base}
	reg := &registryAnswers{layers: map[string][]v1alpha1.Layer{
		"mirror.example.com/swebench/django-1:v1": layers, "10.0.0.1:5000/x:1": layers, "mirror.example.com:5000/x:1": layers}}
	a := allowedOnly{reg, []string{"mirror.example.com"}}
	for _, tt := range []struct {
		ref  string
		want bool
	}{
		{"mirror.example.com/swebench/django-1:v1", true},
		{"10.0.0.1:5000/x:1", false},
		{"mirror.example.com:5000/x:1", false},
	} {
		reg.asked = nil
		_, known := a.Known(tt.ref)
		if known != tt.want || len(reg.asked) > 0 != tt.want {
			t.Errorf("%s: known %v, registry asked %q; want known and asked %v", tt.ref, known, reg.asked, tt.want)
		}
	}
	reg.asked = nil
	if _, known := (allowedOnly{reg, nil}).Known("mirror.example.com/swebench/django-1:v1"); known || len(reg.asked) > 0 {
		t.Errorf("with no registry allowed the registry was asked %q", reg.asked)
	}
}
