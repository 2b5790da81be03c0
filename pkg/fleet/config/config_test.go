package config

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// The documented example shows every default, so it must load as Default.
func TestExampleIsTheDefault(t *testing.T) {
	got, err := Load("../../../examples/fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	// Empty collections in the file decode as empty, not nil.
	got.Clusters, got.Rewrite, got.Labels = nil, nil, nil
	got.Recycle.CheckConfig = CheckConfig{}
	got.Template.NodeSelector, got.Template.Tolerations, got.Template.Labels, got.Template.Annotations = nil, nil, nil, nil
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("examples/fleet.yaml\n got %+v\nwant %+v", got, want)
	}
}

// The configuration manifests/serve ships loads.
func TestServeManifestsConfigLoads(t *testing.T) {
	got, err := Load("../../../manifests/serve/fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxConcurrent != 64 || got.MaxWarmPoolSize != 8 {
		t.Errorf("manifests/serve/fleet.yaml: maxConcurrent %d, maxWarmPoolSize %d", got.MaxConcurrent, got.MaxWarmPoolSize)
	}
}

func TestParse(t *testing.T) {
	f, err := Parse("fleet.yaml", []byte(`apiVersion: sandbox-fleet.io/v1alpha1
kind: FleetConfig
clusters:
- name: a
  namespace: rl
- name: b
  weight: 3
  context: other
placement: capacity-weighted
maxConcurrent: 32
readyTimeout: 90s
template:
  resources:
    limits: {cpu: "2"}
  tolerations:
  - {key: gpu, operator: Exists, effect: NoSchedule}
  extraPodSpec:
    priorityClassName: rollouts
rewrite:
- {from: docker.io, to: mirror.local/hub}
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Clusters[0].Weight != 1 || f.Clusters[1].Weight != 3 || f.MaxConcurrent != 32 || f.ReadyTimeout.Seconds() != 90 ||
		f.MaxWarmPoolSize != 8 || f.Template.Tolerations[0].Key != "gpu" || f.Template.ExtraPodSpec.PriorityClassName != "rollouts" ||
		f.Template.Resources.Limits.Cpu().String() != "2" || f.Template.Resources.Requests.Memory().String() != "512Mi" ||
		f.Rewrite[0].To != "mirror.local/hub" || *f.WarmCreateBudget != 1000 {
		t.Errorf("parsed %+v", f)
	}
	// Explicit zeros that mean something are kept.
	g, err := Parse("fleet.yaml", []byte("apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nwarmCreateBudget: 0\novercommitFactor: 0\n"))
	if err != nil || *g.WarmCreateBudget != 0 || *g.OvercommitFactor != 0 {
		t.Errorf("explicit zeros: %v %v %v", err, *g.WarmCreateBudget, *g.OvercommitFactor)
	}
}

// Each bad file is rejected with the line of the offending field.
func TestParseRejects(t *testing.T) {
	const head = "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\n"
	for _, tt := range []struct {
		name, body, want string
	}{
		{"unknown top-level field", "maxConcurrency: 4\n", "fleet.yaml:3: maxConcurrency: unknown field"},
		{"unknown reset", "recycle:\n  enabled: true\n  reset: overlay\n", `fleet.yaml:5: recycle.reset: unknown reset "overlay": use git`},
		{"relative workdir", "recycle:\n  workdir: testbed\n", `fleet.yaml:4: recycle.workdir: "testbed" is not an absolute path`},
		{"negative maxReuses", "recycle:\n  maxReuses: -1\n", "fleet.yaml:4: recycle.maxReuses: must be at least 1, got -1"},
		{"unknown nested field", "template:\n  resources: {}\n  comand: [sh]\n", "fleet.yaml:5: template.comand: unknown field"},
		{"unknown field in a cluster", "clusters:\n- name: a\n- name: b\n  wieght: 2\n", "fleet.yaml:6: clusters[1].wieght: unknown field"},
		{"unknown field in a toleration", "template:\n  tolerations:\n  - key: a\n    efect: NoSchedule\n", "fleet.yaml:6: template.tolerations[0].efect: unknown field"},
		{"bad quantity", "template:\n  resources:\n    requests:\n      cpu: lots\n", `fleet.yaml:6: template.resources.requests.cpu: "lots" is not a quantity`},
		{"wrong type", "maxConcurrent: many\n", "fleet.yaml:3: cannot unmarshal string into Go struct field Fleet.maxConcurrent of type int"},
		{"wrong type in a cluster", "clusters:\n- name: a\n  weight: heavy\n", "fleet.yaml:3: cannot unmarshal string"},
		{"bad duration", "readyTimeout: soon\n", `time: invalid duration "soon"`},
		{"negative concurrency", "maxConcurrent: -1\n", "fleet.yaml:3: maxConcurrent: must not be negative"},
		{"unknown placement", "placement: random\n", `fleet.yaml:3: placement: unknown placement "random": use one of round-robin`},
		{"headroom out of range", "disk:\n  headroom: 1.5\n", "fleet.yaml:4: disk.headroom: must be a fraction in [0, 1)"},
		{"overcommit below 1", "overcommitFactor: 0.5\n", "fleet.yaml:3: overcommitFactor: must be at least 1"},
		{"cluster without a name", "clusters:\n- namespace: rl\n", "fleet.yaml:4: clusters[0].name: every cluster needs a name"},
		{"duplicate cluster", "clusters:\n- name: a\n- name: a\n", `fleet.yaml:5: clusters[1].name: duplicate cluster name "a"`},
		{"bad namespace", "clusters:\n- name: a\n  namespace: RL_ns\n", `fleet.yaml:5: clusters[0].namespace: "RL_ns" is not a namespace name`},
		{"in-cluster with a context", "clusters:\n- name: a\n  inCluster: true\n  context: x\n", "fleet.yaml:5: clusters[0].inCluster: inCluster excludes kubeconfig and context"},
		{"bad pull policy", "template:\n  imagePullPolicy: Sometimes\n", `fleet.yaml:4: template.imagePullPolicy: "Sometimes" is not Always, IfNotPresent or Never`},
		{"bad rewrite", "rewrite:\n- {from: docker.io, to: ''}\n", "fleet.yaml:4: rewrite[0]: rewrite rule"},
		{"bad label", "labels:\n  team: 'a b'\n", "fleet.yaml:4: labels.team:"},
		{"agent server without a session key", "template:\n  agentServer:\n    command: [server]\n",
			"fleet.yaml:4: template.agentServer.sessionKeySecret: a server without a session key can be driven by anyone who reaches the Pod"},
		{"agent server without a command", "template:\n  agentServer:\n    allowWithoutSessionKey: true\n",
			"fleet.yaml:4: template.agentServer.command: the command that starts the server is required"},
		{"agent server on a relative path", "template:\n  agentServer:\n    command: [s]\n    sessionKeySecret: k\n    healthPath: health\n",
			`fleet.yaml:7: template.agentServer.healthPath: "health" is not an absolute HTTP path`},
		{"pod in extraTemplateSpec", "template:\n  extraTemplateSpec:\n    podTemplate: {}\n",
			"template.extraTemplateSpec.podTemplate: the Pod is the template's own: set its fields in template.extraPodSpec"},
		{"unknown template field", "template:\n  extraTemplateSpec:\n    networkPolicyManagment: Unmanaged\n",
			`template.extraTemplateSpec: not a SandboxTemplate spec of Agent Sandbox v1beta1: json: unknown field "networkPolicyManagment"`},
		{"duplicate key", "maxConcurrent: 1\nmaxConcurrent: 2\n", `fleet.yaml: unmarshal errors:
  line 4: key "maxConcurrent" already set in map`},
		{"not YAML", "clusters: [\n", "fleet.yaml:3: did not find expected node content"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("fleet.yaml", []byte(head+tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse = %v; want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := Parse("fleet.yaml", []byte("kind: FleetConfig\n")); err == nil || !strings.Contains(err.Error(), "fleet.yaml:1: apiVersion: want apiVersion sandbox-fleet.io/v1alpha1") {
		t.Errorf("missing apiVersion: %v", err)
	}
	if _, err := Load("no-such-file.yaml"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// Validate judges a configuration changed after its defaults were filled
// in, as the flags change it, by the rules a file is judged by.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Fleet)
		paths  []string
	}{
		{"defaults", func(*Fleet) {}, nil},
		{"zero where a default stood", func(f *Fleet) { f.MaxWarmPoolSize, f.Epochs, f.ReadyTimeout.Duration = 0, 0, 0 },
			[]string{"maxWarmPoolSize", "epochs", "readyTimeout"}},
		{"zero where none is meant", func(f *Fleet) { f.Concurrency, f.MaxLiveSandboxes, f.KubeAPIQPS = 0, 0, 0 }, nil},
		{"unknown names", func(f *Fleet) { f.Strategy, f.Placement, f.ClaimPacing = "eager", "random", "later" },
			[]string{"strategy", "placement", "claimPacing"}},
		{"negative", func(f *Fleet) { f.WindowSize, f.WarmCreateBudget = -1, new(-5) }, []string{"windowSize", "warmCreateBudget"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Default()
			tc.change(&f)
			var got []string
			if err := f.Validate(); err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					var fe *FieldError
					if !errors.As(e, &fe) {
						t.Fatalf("%v is not a *FieldError", e)
					}
					got = append(got, fe.Path)
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.paths))
			if !slices.Equal(got, want) {
				t.Errorf("Validate refused %v, want %v", got, want)
			}
		})
	}
}
