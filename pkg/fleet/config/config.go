// Package config is the fleet configuration file (`-f fleet.yaml`): every
// knob of agent-sandbox-rl's FleetConfig, TemplateSpec and ClusterConfig,
// with the same defaults. Loading is strict — an unknown field, a value of
// the wrong type or a value out of range is an error that names the file
// and line — so a typo never silently falls back to a default.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// APIVersion and Kind head every fleet configuration file.
const (
	APIVersion = "sandbox-fleet.io/v1alpha1"
	Kind       = "FleetConfig"
)

// Placements are the ways pools are spread over clusters.
var Placements = []string{"round-robin", "least-loaded", "capacity-weighted", "image-affinity"}

// ClaimPacings are the ways a run paces its claims.
var ClaimPacings = []string{"none", "warm"}

// Fleet is the whole configuration.
type Fleet struct {
	// APIVersion is sandbox-fleet.io/v1alpha1 and Kind FleetConfig: they
	// say what the file is.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Clusters are the targets, one per cluster and node pool. Empty means
	// the current kubeconfig context.
	Clusters []Cluster `json:"clusters,omitempty"`
	// Placement spreads pools over clusters: round-robin, least-loaded,
	// capacity-weighted or image-affinity (to the cluster whose nodes'
	// image caches hold most of the image; without cache data, the one a
	// hash of the image picks; least-loaded when that is full). Default
	// image-affinity.
	Placement string `json:"placement,omitempty"`
	// PlannedPulls, under sliding and pipelined on one cluster, plans
	// which nodes run which images from the nodes' image caches
	// (asrl-prepull-agent): images that share layers go to the same
	// nodes, each node's agent pulls its images in the order it runs
	// them, and each node runs its own queue of tasks, as many at once as
	// it has slots, each sandbox started cold on its planned node; a node
	// that goes has its tasks dealt to the others. Without agents the run
	// says so once and goes on without a plan. Serve sessions and
	// --prepull runs plan none. Default false until measured on real
	// nodes; on the benchmark's simulated sweep they take about half the
	// time and pull a thirtieth of the bytes (docs/performance.md).
	PlannedPulls *bool `json:"plannedPulls,omitempty"`
	// AgentSilence is, under plannedPulls, how long a planned node's
	// agent may leave its pulls unreported (it reports at least every
	// 20 s while it pulls) before the run takes it for stopped: the tasks
	// of the images the node has not pulled go to other planned nodes,
	// which pull them, and the node runs the rest. Default 1m.
	AgentSilence metav1.Duration `json:"agentSilence,omitempty"`
	// Strategy is when pools are warm: none (one single-replica pool per
	// image, on demand), naive (all at once), sliding (a window of images
	// at a time) or pipelined (the next window warms while one runs; on
	// nodes that hold fewer sandboxes than the plan's peak, once the
	// running window's tasks all have sandboxes). Default naive.
	Strategy string `json:"strategy,omitempty"`
	// MaxConcurrent is the concurrency budget: it sizes pools and bounds
	// tasks in flight. Default: Concurrency when that is given, else 1
	// (see Budget).
	MaxConcurrent int `json:"maxConcurrent,omitempty"`
	// Concurrency is how many tasks run at once; 0 is MaxConcurrent.
	Concurrency int `json:"concurrency,omitempty"`
	// Epochs is how many passes run over the tasks; a plan of one window
	// keeps its pools warm between them. Default 1.
	Epochs int `json:"epochs,omitempty"`
	// KeepWarm leaves the pools in place at the end, for the next run with
	// the same run id; tear them down with `teardown --run-id`.
	KeepWarm bool `json:"keepWarm,omitempty"`
	// MaxWarmPoolSize caps every pool. Default 8.
	MaxWarmPoolSize int `json:"maxWarmPoolSize,omitempty"`
	// WarmPerTask warms one replica per task (RL instant claims). Default false.
	WarmPerTask bool `json:"warmPerTask,omitempty"`
	// WindowSize is how many images sliding and pipelined keep warm; 0
	// sizes it from MaxConcurrent and Disk.
	WindowSize int `json:"windowSize,omitempty"`
	// ReadyTimeout bounds the wait for a pool or claim. Default 15m.
	ReadyTimeout metav1.Duration `json:"readyTimeout,omitempty"`
	// WarmCreateBudget fills pools in waves of at most this many sandbox
	// creates; 0 fills all at once. Default 1000.
	WarmCreateBudget *int `json:"warmCreateBudget,omitempty"`
	// OvercommitFactor trips the runaway breaker when live sandboxes exceed
	// expected × factor; 0 disables it. Default 1.5.
	OvercommitFactor *float64 `json:"overcommitFactor,omitempty"`
	// MaxLiveSandboxes is an absolute ceiling for the breaker; 0 is none.
	MaxLiveSandboxes int `json:"maxLiveSandboxes,omitempty"`
	// BreakerInterval is how often the breaker counts live sandboxes, and
	// BreakerPolls how many counts in a row must be over the ceiling for
	// it to trip. Defaults 5s and 3.
	BreakerInterval metav1.Duration `json:"breakerInterval,omitempty"`
	BreakerPolls    int             `json:"breakerPolls,omitempty"`
	// ClaimPacing is none (claim at once) or warm (claim only while the
	// pool has a Ready sandbox not yet spoken for, so claims adopt warm
	// sandboxes instead of each cold-starting one next to a refilling
	// pool). Default none: on the benchmark's cluster warm pacing took the
	// warm share from about 30% to 97% but cost about a tenth of the
	// throughput, since waiting for a refill is as slow as a cold start
	// where Pods start at once (see docs/performance.md).
	ClaimPacing string `json:"claimPacing,omitempty"`
	// ClaimGrace is how long a sandbox may back off (ImagePullBackOff,
	// CrashLoopBackOff, a container config error) before its claim, or its
	// replica of a warm pool, is given up. Default 2m: the kubelet retries
	// a pull within 10 s, 20 s, 40 s… so two minutes sees several retries,
	// enough for a throttling registry or a late pull Secret; a wrong tag
	// never clears. Terminal trouble (an invalid image name, a pull that
	// policy forbids, OOM) fails at once.
	ClaimGrace metav1.Duration `json:"claimGrace,omitempty"`
	// UnschedulableGrace is how long a sandbox may find no node with room
	// before it is given up. Default 10m: a cluster autoscaler adds a node
	// in a few minutes, and a pending sandbox costs nothing meanwhile.
	UnschedulableGrace metav1.Duration `json:"unschedulableGrace,omitempty"`
	// ControllerGrace is how long the Agent Sandbox controller may be down
	// — its leader Lease unrenewed — before the tasks waiting for a
	// sandbox end as infrastructure failures (reason controller) instead
	// of waiting out readyTimeout. Default 2m: a replica that takes over
	// waits out the Lease (15 s) and a rolled-out controller starts within
	// a minute; a crash-looping one backs off longer than that.
	ControllerGrace metav1.Duration `json:"controllerGrace,omitempty"`
	// FailFast gives up sandboxes in trouble after the graces above; false
	// waits out readyTimeout instead (terminal trouble still fails at
	// once: no wait can mend it). Default true.
	FailFast *bool `json:"failFast,omitempty"`
	// KubeAPIQPS and KubeAPIBurst are this client's rate limits on each
	// cluster's API server. Defaults 500 and 1000: a thousand claims are
	// created at once, and priority and fairness on the server, not this
	// client, protects the control plane. The run report says when these
	// limits delayed requests.
	KubeAPIQPS   float32 `json:"kubeAPIQPS,omitempty"`
	KubeAPIBurst int     `json:"kubeAPIBurst,omitempty"`
	// Recycle resets a sandbox between tasks of its image instead of
	// claiming a fresh one for each.
	Recycle Recycle `json:"recycle,omitempty"`
	// Session runs the commands given to a sandbox over one long-lived
	// shell per sandbox (one exec stream) instead of an exec each, so an
	// agent loop of many small commands pays one exec's set-up. Default
	// false.
	Session bool `json:"session,omitempty"`
	// Template is how every sandbox Pod is built.
	Template Template `json:"template,omitempty"`
	// Disk lets windows be capped so resident images fit the nodes' disk.
	Disk Disk `json:"disk,omitempty"`
	// Rewrite redirects task images to mirrors, first match wins.
	Rewrite []images.Rule `json:"rewrite,omitempty"`
	// Labels are added to every object the run creates.
	Labels map[string]string `json:"labels,omitempty"`
}

// Cluster is one target: a cluster, or a node pool of one.
type Cluster struct {
	// Name names the cluster in the report, the logs and the objects'
	// placement; required, unique.
	Name string `json:"name"`
	// Kubeconfig and Context select the cluster; empty means the default
	// kubeconfig and its current context.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// InCluster uses the Pod's service account instead of a kubeconfig.
	InCluster bool `json:"inCluster,omitempty"`
	// Namespace is where the run's objects go there. Default -n, else
	// the context's namespace.
	Namespace string `json:"namespace,omitempty"`
	// NodeSelector, RuntimeClassName and ImagePullSecret override the
	// template's for this cluster.
	NodeSelector     map[string]string `json:"nodeSelector,omitempty"`
	RuntimeClassName string            `json:"runtimeClassName,omitempty"`
	ImagePullSecret  string            `json:"imagePullSecret,omitempty"`
	// Weight is this cluster's share under capacity-weighted placement. Default 1.
	Weight float64 `json:"weight,omitempty"`
	// MaxReplicas caps the warm replicas placed here; 0 is no cap.
	MaxReplicas int `json:"maxReplicas,omitempty"`
}

// Template describes the sandbox Pod.
type Template struct {
	// Resources of the sandbox container. Default requests 250m CPU, 512Mi.
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// Command keeps the container alive for exec. Default [sleep, infinity].
	Command []string `json:"command,omitempty"`
	// RuntimeClassName (gVisor, Kata...), NodeSelector and
	// ImagePullSecret (a Secret's name in the run's namespace) go on every
	// sandbox Pod; a cluster entry's override them.
	RuntimeClassName string            `json:"runtimeClassName,omitempty"`
	NodeSelector     map[string]string `json:"nodeSelector,omitempty"`
	ImagePullSecret  string            `json:"imagePullSecret,omitempty"`
	// ImagePullPolicy is Always, IfNotPresent or Never. Default IfNotPresent,
	// so nodes reuse their image cache across runs.
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Colocate prefers one node for all replicas of a pool, so only one
	// node pulls the image.
	Colocate bool `json:"colocate,omitempty"`
	// Tolerations let the sandboxes run on tainted nodes; where a
	// SandboxPolicy governs the namespace, only on those whose taint keys
	// it allows (spec.security.allowedTolerationKeys).
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Labels and Annotations go on every sandbox Pod.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// ExtraPodSpec is merged into the generated Pod spec, for anything not
	// covered above. A container whose image is "{task_image}" runs each
	// pool's task image (a grading sidecar beside the sandbox, say).
	ExtraPodSpec *corev1.PodSpec `json:"extraPodSpec,omitempty"`
	// ExtraTemplateSpec is merged into each SandboxTemplate's spec, for the
	// Agent Sandbox template fields the Pod is not (networkPolicy,
	// networkPolicyManagement, volumeClaimTemplates, service, ...); the Pod
	// itself is extraPodSpec's.
	ExtraTemplateSpec map[string]any `json:"extraTemplateSpec,omitempty"`
	// AgentServer runs an agent framework's server in each sandbox, and
	// makes the sandbox Ready only once the server answers.
	AgentServer *AgentServer `json:"agentServer,omitempty"`
}

// DefaultWorkdir is the git work tree a recycled sandbox's reset puts
// back unless recycle.workdir says otherwise: where SWE-bench images keep
// the repository.
const DefaultWorkdir = "/testbed"

// TaskImage is what an extraPodSpec container names as its image to run
// the task's own image: each pool's template puts its image there.
const TaskImage = "{task_image}"

// AgentServer is an HTTP server in the sandbox that the agent framework
// drives — OpenHands' agent-server, say — run as the sandbox container's
// command instead of the keepalive. Startup and readiness probes on its
// health path keep the sandbox from being Ready, and so from being claimed,
// until it answers.
type AgentServer struct {
	// Command starts the server (it must keep running). Required.
	Command []string `json:"command"`
	// Image, when set, holds the server: its Path is copied into each
	// sandbox by an init container, so that any task image can run it.
	// Empty means the task image has the server.
	Image string `json:"image,omitempty"`
	// Path is where the server is in Image, and where the sandbox finds
	// the copy. Default /opt/agent-server.
	Path string `json:"path,omitempty"`
	// Port is the port the server listens on. Default 8000.
	Port int32 `json:"port,omitempty"`
	// HealthPath answers 200 once the server serves. Default /health.
	HealthPath string `json:"healthPath,omitempty"`
	// StartupTimeout is how long the server may take to answer first;
	// past it the container is restarted. Default 2m.
	StartupTimeout metav1.Duration `json:"startupTimeout,omitempty"`
	// SessionKeySecret names a Secret in the run's namespace whose key
	// "session-key" the server gets as SessionKeyEnv: the key a client
	// must send (OpenHands' X-Session-API-Key).
	SessionKeySecret string `json:"sessionKeySecret,omitempty"`
	// SessionKeyEnv is the variable the key is given in. Default
	// SESSION_API_KEY, OpenHands' own.
	SessionKeyEnv string `json:"sessionKeyEnv,omitempty"`
	// AllowWithoutSessionKey runs a server with no session key, which
	// anyone reaching the Pod can drive. Default false: without
	// sessionKeySecret the configuration is refused.
	AllowWithoutSessionKey bool `json:"allowWithoutSessionKey,omitempty"`
}

// Recycle is sandbox recycling: a sandbox that ran a task is reset in
// place and runs the next task of its image, instead of being deleted and
// a fresh one claimed. Claims then scale with images, not tasks: an
// image's tasks run one after another on its sandbox.
type Recycle struct {
	// Enabled turns recycling on (--recycle). Default false.
	Enabled bool `json:"enabled,omitempty"`
	// MaxReuses is how many resets a sandbox takes before it is released
	// and a fresh one claimed (rotate). Default 32.
	MaxReuses int `json:"maxReuses,omitempty"`
	// ResetTimeout bounds a reset; one that takes longer quarantines the
	// sandbox. Default 1m.
	ResetTimeout metav1.Duration `json:"resetTimeout,omitempty"`
	// Reset is how a sandbox is put back: git (restore the work tree to
	// the commit and refs it started with, remove what the task added,
	// stop its processes, empty /tmp). Default git, the only kind.
	Reset string `json:"reset,omitempty"`
	// Workdir is the git work tree put back. Default /testbed
	// (DefaultWorkdir).
	Workdir string `json:"workdir,omitempty"`
	// CheckEnv checks after each reset that a command's environment is
	// what it was at the sandbox's first use.
	CheckEnv bool `json:"checkEnv,omitempty"`
	// CheckConfig names what else must be as it was at first use.
	CheckConfig CheckConfig `json:"checkConfig,omitempty"`
	// Canary is a shell command, run in workdir after each reset, whose
	// output and exit code must equal those of the sandbox's first use.
	Canary string `json:"canary,omitempty"`
}

// CheckConfig is what a reset checks beyond the work tree.
type CheckConfig struct {
	// Files whose contents must not change.
	Files []string `json:"files,omitempty"`
	// Commands (shell, run in workdir) whose output must not change, such
	// as pip freeze.
	Commands []string `json:"commands,omitempty"`
}

// Resets are the kinds of recycle.reset.
var Resets = []string{"git"}

// Disk sizes windows by node disk.
type Disk struct {
	// AvgImageGB is the size of an image on a node's disk, and
	// NodeEphemeralGB a node's disk for images: both set, sliding and
	// pipelined size their windows so that the images warm at once fit,
	// and the plan warns when naive's do not. 0: no bound from disk.
	AvgImageGB      float64 `json:"avgImageGB,omitempty"`
	NodeEphemeralGB float64 `json:"nodeEphemeralGB,omitempty"`
	// Headroom is the fraction of node disk kept free. Default 0.25.
	Headroom *float64 `json:"headroom,omitempty"`
	// Nodes spreads distinct images over a pool of this many nodes; 0 is
	// the conservative single-node bound.
	Nodes int `json:"nodes,omitempty"`
}

// DefaultAgentSilence is AgentSilence's default.
const DefaultAgentSilence = time.Minute

// Default returns the configuration with every default filled in.
func Default() Fleet {
	f := Fleet{APIVersion: APIVersion, Kind: Kind}
	f.applyDefaults()
	return f
}

func (f *Fleet) applyDefaults() {
	f.Strategy = cmp.Or(f.Strategy, "naive")
	f.Epochs = cmp.Or(f.Epochs, 1)
	f.Placement = cmp.Or(f.Placement, "image-affinity")
	f.BreakerInterval.Duration = cmp.Or(f.BreakerInterval.Duration, 5*time.Second)
	f.BreakerPolls = cmp.Or(f.BreakerPolls, 3)
	f.ClaimPacing = cmp.Or(f.ClaimPacing, "none")
	f.ClaimGrace.Duration = cmp.Or(f.ClaimGrace.Duration, 2*time.Minute)
	f.UnschedulableGrace.Duration = cmp.Or(f.UnschedulableGrace.Duration, 10*time.Minute)
	f.AgentSilence.Duration = cmp.Or(f.AgentSilence.Duration, DefaultAgentSilence)
	f.ControllerGrace.Duration = cmp.Or(f.ControllerGrace.Duration, 2*time.Minute)
	f.MaxWarmPoolSize = cmp.Or(f.MaxWarmPoolSize, 8)
	f.ReadyTimeout.Duration = cmp.Or(f.ReadyTimeout.Duration, 15*time.Minute)
	// Pointers: an explicit zero (false, 0) is a choice, not unset.
	if f.FailFast == nil {
		f.FailFast = new(true)
	}
	if f.PlannedPulls == nil {
		f.PlannedPulls = new(false)
	}
	if f.WarmCreateBudget == nil {
		f.WarmCreateBudget = new(1000)
	}
	if f.OvercommitFactor == nil {
		f.OvercommitFactor = new(1.5)
	}
	if f.Disk.Headroom == nil {
		f.Disk.Headroom = new(0.25)
	}
	f.Recycle.applyDefaults()
	f.Template.applyDefaults()
	for i := range f.Clusters {
		f.Clusters[i].Weight = cmp.Or(f.Clusters[i].Weight, 1)
	}
}

func (r *Recycle) applyDefaults() {
	r.MaxReuses = cmp.Or(r.MaxReuses, 32)
	r.ResetTimeout.Duration = cmp.Or(r.ResetTimeout.Duration, time.Minute)
	r.Reset = cmp.Or(r.Reset, "git")
	r.Workdir = cmp.Or(r.Workdir, DefaultWorkdir)
}

func (t *Template) applyDefaults() {
	if t.Resources.Requests == nil {
		t.Resources.Requests = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("250m"),
			corev1.ResourceMemory: resource.MustParse("512Mi"),
		}
	}
	if len(t.Command) == 0 {
		t.Command = []string{"sleep", "infinity"}
	}
	t.ImagePullPolicy = cmp.Or(t.ImagePullPolicy, corev1.PullIfNotPresent)
	if a := t.AgentServer; a != nil {
		a.Path = cmp.Or(a.Path, "/opt/agent-server")
		a.Port = cmp.Or(a.Port, 8000)
		a.HealthPath = cmp.Or(a.HealthPath, "/health")
		a.SessionKeyEnv = cmp.Or(a.SessionKeyEnv, "SESSION_API_KEY")
		a.StartupTimeout.Duration = cmp.Or(a.StartupTimeout.Duration, 2*time.Minute)
	}
}

// Budget is the concurrency budget that sizes the pools: MaxConcurrent, or
// when only Concurrency is given that, so that a run asked to do 16 tasks
// at once warms for 16, or 1.
func (f *Fleet) Budget() int {
	switch {
	case f.MaxConcurrent > 0:
		return f.MaxConcurrent
	case f.Concurrency > 0:
		return f.Concurrency
	}
	return 1
}

// Load reads and checks a configuration file, filling in defaults.
func Load(path string) (Fleet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Fleet{}, fmt.Errorf("reading the fleet config: %w", err)
	}
	return Parse(path, b)
}

// Parse checks a configuration read from file and fills in defaults. Every
// problem is reported as file:line.
func Parse(file string, data []byte) (Fleet, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		// "yaml: line 4: msg" becomes "fleet.yaml:4: msg", like every other error.
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			return Fleet{}, fmt.Errorf("%s:%s: %s", file, m[1], m[2])
		}
		return Fleet{}, fmt.Errorf("%s: %w", file, err)
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	at := func(path string) string { return fmt.Sprintf("%s:%d", file, lineOf(doc, path)) }

	var errs []error
	checkFields(doc, reflect.TypeFor[Fleet](), "", func(line int, path, msg string) {
		errs = append(errs, fmt.Errorf("%s:%d: %s: %s", file, line, path, msg))
	})
	if len(errs) > 0 {
		return Fleet{}, errors.Join(errs...)
	}
	var f Fleet
	if err := sigsyaml.UnmarshalStrict(data, &f); err != nil {
		if path := fieldOf(err); path != "" {
			return Fleet{}, fmt.Errorf("%s: %s", at(path), strictMessage(err))
		}
		// Errors without a field path carry their own line, if any.
		return Fleet{}, fmt.Errorf("%s: %s", file, strictMessage(err))
	}
	fail := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", at(path), path, fmt.Sprintf(format, args...)))
	}
	f.applyDefaults()
	f.validate(fail)
	if len(errs) > 0 {
		return Fleet{}, errors.Join(errs...)
	}
	return f, nil
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Message }

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// typeField finds the field path in the JSON decoder's type errors, such
// as "Go struct field Cluster.clusters.weight of type float64".
var typeField = regexp.MustCompile(`Go struct field [A-Za-z]+\.(\S+) of type`)

// fieldOf extracts the field path a decoding error is about.
func fieldOf(err error) string {
	if m := typeField.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

// strictMessage strips the decoder's layers of prefixes.
func strictMessage(err error) string {
	msg := err.Error()
	for _, prefix := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: ", "error converting YAML to JSON: ", "yaml: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return msg
}

// lineOf finds the line of a field path such as "clusters[1].weight" or
// "template.resources", falling back to the nearest ancestor found.
func lineOf(node *yaml.Node, path string) int {
	line := node.Line
	for _, part := range splitPath(path) {
		next, keyLine := child(node, part)
		if next == nil {
			break
		}
		node, line = next, keyLine
	}
	return max(line, 1)
}

// splitPath splits "a.b[2].c" into a, b, 2, c.
func splitPath(path string) []string {
	path = strings.NewReplacer("[", ".", "]", "").Replace(path)
	if path == "" {
		return nil
	}
	return strings.Split(path, ".")
}

// child returns a mapping's value for key, with the key's line, or a
// sequence's element at an index, with its own.
func child(node *yaml.Node, part string) (*yaml.Node, int) {
	switch node.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value == part {
				return node.Content[i+1], node.Content[i].Line
			}
		}
	case yaml.SequenceNode:
		if i, err := strconv.Atoi(part); err == nil && i < len(node.Content) {
			return node.Content[i], node.Content[i].Line
		}
	}
	return nil, 0
}
