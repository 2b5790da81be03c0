package agent_test

import (
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// The asrl-prepull-jobs policy judges registries as images.Within does —
// over Within's own table — for images named in full, and refuses the
// rest; its patterns are the webhook's.
func TestPrepullJobRegistries(t *testing.T) {
	b, err := os.ReadFile("../../../manifests/prepull-agent/limits.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vap struct {
		Kind string
		Spec struct {
			Variables []struct{ Name, Expression string }
		}
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if err := yaml.Unmarshal([]byte(doc), &vap); err != nil {
			t.Fatal(err)
		}
		if vap.Kind == "ValidatingAdmissionPolicy" {
			break
		}
	}
	expr := map[string]string{}
	for _, v := range vap.Spec.Variables {
		expr[v.Name] = v.Expression
	}
	for _, pattern := range []string{policy.CanonicalImage, "^(?:" + policy.DockerHubShortForms + ")"} {
		if !strings.Contains(expr["outside"], strconv.Quote(pattern)) {
			t.Errorf("the policy's outside does not use the webhook's pattern %s", strconv.Quote(pattern))
		}
	}
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err = env.Extend(cel.Variable("params", cel.DynType), cel.Variable("object", cel.DynType), cel.Variable("variables", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	compile := func(name string) cel.Program {
		ast, iss := env.Compile(expr[name])
		if iss.Err() != nil {
			t.Fatalf("%s: %v", name, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		return prg
	}
	allowed, outside := compile("allowed"), compile("outside")
	// admits reports whether the policy lets a job pull image with the
	// ConfigMap's allowed-registries prefix.
	admits := func(image, prefix string) bool {
		a, _, err := allowed.Eval(map[string]any{"params": map[string]any{"data": map[string]any{"allowed-registries": prefix}}})
		if err != nil {
			t.Fatal(err)
		}
		o, _, err := outside.Eval(map[string]any{"object": map[string]any{"spec": map[string]any{"images": []string{image}}},
			"variables": map[string]any{"allowed": a.Value()}})
		if err != nil {
			t.Fatal(err)
		}
		n, err := o.ConvertToNative(reflect.TypeFor[[]string]())
		if err != nil {
			t.Fatal(err)
		}
		return len(n.([]string)) == 0
	}

	data, err := os.ReadFile("../../../pkg/images/testdata/within.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Image, Prefix string
		Within        bool
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, tt := range cases {
		full, err := images.Normalize(tt.Image)
		if err != nil {
			t.Fatal(err)
		}
		if got := admits(full, tt.Prefix); got != tt.Within {
			t.Errorf("image %s, allowed %s: the policy admits it %v, but Within says %v", full, tt.Prefix, got, tt.Within)
		}
	}
	// Images not named in full are refused, whatever Within says of them.
	for _, image := range []string{"busybox:1.36", "docker.io/busybox:1.36", "Mirror.example.com/hub/x:1", "mirror.example.com/hub/x"} {
		if admits(image, "mirror.example.com,docker.io") {
			t.Errorf("the policy admits %s, not named in full", image)
		}
	}
}
