// Package inputs reads what a run is made of — the fleet configuration,
// the flags that override it and the task files — for the verbs that plan
// or start one. Everything is checked here, before anything is created, and
// every problem is a usage error that says where it is.
package inputs

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// TaskFlags are how a verb's task files are read — rows' id and image
// fields and mirror rewrites — shared by every verb that reads tasks, so
// that a mirrored run pre-pulls and looks up the images it will run.
type TaskFlags struct {
	opts     tasks.Options
	rewrites []string
}

// AddFlags registers --id-field, --image-field and --rewrite on fs; the
// verb names its own task-file flag.
func (t *TaskFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&t.opts.IDField, "id-field", "", "row field holding the task id (default: id, instance_id, ...)")
	fs.StringVar(&t.opts.ImageField, "image-field", "", "row field holding the image (default: image, docker_image, ...)")
	fs.StringArrayVar(&t.rewrites, "rewrite", nil, "redirect images FROM=TO, e.g. docker.io=mirror.example.com/hub; before the config's rules; repeatable")
}

// Load reads files ("-" is stdin) with the flags' fields and --rewrite
// rules, then configRules. Files with no task are an error.
func (t *TaskFlags) Load(files []string, stdin io.Reader, configRules []images.Rule) ([]tasks.Task, error) {
	var rules []images.Rule
	for _, r := range t.rewrites {
		rule, err := images.ParseRule(r)
		if err != nil {
			return nil, usage.Errorf("--rewrite %q: %w", r, err)
		}
		rules = append(rules, rule)
	}
	opts := t.opts
	opts.Rewrite = append(rules, configRules...)
	loaded, err := tasks.Load(files, stdin, opts)
	if err != nil {
		return nil, usage.Errorf("%w", err)
	}
	return loaded, nil
}

// Flags are the command-line flags naming a run's configuration and tasks.
type Flags struct {
	ConfigFile string
	TaskFiles  []string
	// TasksOptional lets Load succeed with no task file: a session
	// (`serve`) is given its tasks as it runs.
	TasksOptional bool
	tasks         TaskFlags

	// Overrides of the configuration file, applied when given.
	strategy, placement, claimPacing    string
	concurrency, maxConcurrent          int
	maxWarmPoolSize, windowSize, epochs int
	warmCreateBudget, maxLiveSandboxes  int
	warmPerTask, keepWarm, failFast     bool
	colocate                            bool
	readyTimeout, claimGrace            time.Duration
	unschedulableGrace, controllerGrace time.Duration
	overcommitFactor                    float64
	kubeAPIQPS                          float32
	kubeAPIBurst                        int
	recycle, checkEnv, session          bool
	maxReuses                           int
	resetTimeout                        time.Duration
	canary                              string
}

// AddFlags registers the flags on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.TaskFiles, "tasks", nil, "task file: JSONL rows or a list of images; - reads stdin; repeatable")
	f.tasks.AddFlags(fs)
	f.addConfigFlags(fs)
}

// AddConfigFlags registers, for a verb that makes its own tasks, -f and
// the flags overriding the configuration but those named in except, which
// the verb defines its own way. Load then reads no task file.
func (f *Flags) AddConfigFlags(fs *pflag.FlagSet, except ...string) {
	f.TasksOptional = true
	all := pflag.NewFlagSet("", pflag.ContinueOnError)
	f.addConfigFlags(all)
	all.VisitAll(func(flag *pflag.Flag) {
		if !slices.Contains(except, flag.Name) {
			fs.AddFlag(flag)
		}
	})
}

func (f *Flags) addConfigFlags(fs *pflag.FlagSet) {
	// Help shows the defaults the configuration has, written once there.
	def := config.Default()
	fs.StringVarP(&f.ConfigFile, "config", "f", "", "fleet configuration file (see examples/fleet.yaml); flags override it")
	fs.StringVar(&f.strategy, "strategy", "", fmt.Sprintf("when pools are warm: %s (default %s)", strings.Join(config.Strategies, ", "), def.Strategy))
	fs.StringVar(&f.placement, "placement", "", fmt.Sprintf("how pools spread over clusters: %s (default %s)", strings.Join(config.Placements, ", "), def.Placement))
	fs.IntVar(&f.concurrency, "concurrency", 0, "tasks at once (default: --max-concurrent)")
	fs.IntVar(&f.maxConcurrent, "max-concurrent", 0, "concurrency budget that sizes the warm pools (default: --concurrency, else 1)")
	fs.IntVar(&f.maxWarmPoolSize, "max-warmpool-size", 0, fmt.Sprintf("cap on any one pool (default %d)", def.MaxWarmPoolSize))
	fs.BoolVar(&f.warmPerTask, "warm-per-task", false, "warm one sandbox per task, up to the cap, for instant claims")
	fs.BoolVar(&f.colocate, "colocate", false, "prefer one node for all replicas of a pool, so that one node pulls its image")
	fs.IntVar(&f.windowSize, "window-size", 0, "images warm at once for sliding and pipelined (default: sized from the budget and disk)")
	fs.IntVar(&f.epochs, "epochs", 0, fmt.Sprintf("passes over the tasks; a plan of one window keeps its pools warm between them (default %d)", def.Epochs))
	fs.BoolVar(&f.keepWarm, "keep-warm", false, "leave the pools warm at the end; tear them down with: teardown --run-id ID")
	fs.IntVar(&f.warmCreateBudget, "warm-create-budget", 0, fmt.Sprintf("fill pools in waves of at most this many creates; 0 = all at once (default %d)", *def.WarmCreateBudget))
	fs.DurationVar(&f.readyTimeout, "ready-timeout", 0, fmt.Sprintf("how long a pool may take to be ready (default %s)", def.ReadyTimeout.Duration))
	fs.StringVar(&f.claimPacing, "claim-pacing", "", fmt.Sprintf("none: claim at once; warm: claim only while the pool has a free Ready sandbox (default %s)", def.ClaimPacing))
	fs.DurationVar(&f.claimGrace, "claim-grace", 0, fmt.Sprintf("how long a sandbox may back off (image pull, crash loop) before it is given up (default %s)", def.ClaimGrace.Duration))
	fs.DurationVar(&f.unschedulableGrace, "unschedulable-grace", 0, fmt.Sprintf("how long a sandbox may wait for a node with room before it is given up (default %s)", def.UnschedulableGrace.Duration))
	fs.DurationVar(&f.controllerGrace, "controller-grace", 0, fmt.Sprintf("how long the Agent Sandbox controller may be down before the tasks waiting for a sandbox fail as infra (default %s)", def.ControllerGrace.Duration))
	fs.BoolVar(&f.failFast, "fail-fast", *def.FailFast, "give up sandboxes in trouble after the graces; false waits out --ready-timeout")
	fs.Float64Var(&f.overcommitFactor, "overcommit-factor", 0, fmt.Sprintf("runaway breaker: tear down above expected × this; 0 = off (default %g)", *def.OvercommitFactor))
	fs.IntVar(&f.maxLiveSandboxes, "max-live-sandboxes", 0, "runaway breaker: absolute ceiling of live sandboxes")
	fs.Float32Var(&f.kubeAPIQPS, "kube-api-qps", 0, fmt.Sprintf("requests a second to each API server, on average (default %d)", kube.DefaultQPS))
	fs.IntVar(&f.kubeAPIBurst, "kube-api-burst", 0, fmt.Sprintf("requests to each API server at once (default %d)", kube.DefaultBurst))
	fs.BoolVar(&f.recycle, "recycle", false, "reset a sandbox in place after a task and run the next task of its image in it, instead of a fresh claim per task")
	fs.IntVar(&f.maxReuses, "max-reuses", 0, fmt.Sprintf("with --recycle, resets a sandbox takes before a fresh one replaces it (default %d)", def.Recycle.MaxReuses))
	fs.DurationVar(&f.resetTimeout, "reset-timeout", 0, fmt.Sprintf("with --recycle, bound on a reset; a slower one quarantines the sandbox (default %s)", def.Recycle.ResetTimeout.Duration))
	fs.BoolVar(&f.checkEnv, "check-env", false, "with --recycle, check after each reset that the environment is as at first use")
	fs.StringVar(&f.canary, "canary", "", "with --recycle, a shell command run after each reset whose output must match its first run's")
	fs.BoolVar(&f.session, "session", false, "run each sandbox's commands over one long-lived shell instead of an exec each")
}

// Load reads the configuration, applies the flags given on fs over it, and
// loads the tasks, reading stdin for the task file "-".
func (f *Flags) Load(fs *pflag.FlagSet, stdin io.Reader) (config.Fleet, []tasks.Task, error) {
	cfg := config.Default()
	if f.ConfigFile != "" {
		var err error
		if cfg, err = config.Load(f.ConfigFile); err != nil {
			return config.Fleet{}, nil, usage.Errorf("%w", err)
		}
	}
	if err := f.override(fs, &cfg); err != nil {
		return config.Fleet{}, nil, err
	}
	if len(f.TaskFiles) == 0 && f.TasksOptional {
		return cfg, nil, nil
	}
	if len(f.TaskFiles) == 0 {
		return config.Fleet{}, nil, usage.Errorf("no tasks: give a task file with --tasks FILE (JSONL rows or a list of images; - for stdin)")
	}
	loaded, err := f.tasks.Load(f.TaskFiles, stdin, cfg.Rewrite)
	if err != nil {
		return config.Fleet{}, nil, err
	}
	return cfg, loaded, nil
}

// binding is a flag that sets a field of the configuration, at path in
// the file.
type binding struct {
	flag, path string
	set        func(*config.Fleet)
}

// bindings are the flags that override the configuration. They only set
// fields: the configuration's own Validate judges the values.
func (f *Flags) bindings() []binding {
	return []binding{
		{"strategy", "strategy", func(c *config.Fleet) { c.Strategy = f.strategy }},
		{"placement", "placement", func(c *config.Fleet) { c.Placement = f.placement }},
		{"concurrency", "concurrency", func(c *config.Fleet) { c.Concurrency = f.concurrency }},
		{"max-concurrent", "maxConcurrent", func(c *config.Fleet) { c.MaxConcurrent = f.maxConcurrent }},
		{"max-warmpool-size", "maxWarmPoolSize", func(c *config.Fleet) { c.MaxWarmPoolSize = f.maxWarmPoolSize }},
		{"window-size", "windowSize", func(c *config.Fleet) { c.WindowSize = f.windowSize }},
		{"epochs", "epochs", func(c *config.Fleet) { c.Epochs = f.epochs }},
		{"max-live-sandboxes", "maxLiveSandboxes", func(c *config.Fleet) { c.MaxLiveSandboxes = f.maxLiveSandboxes }},
		{"kube-api-qps", "kubeAPIQPS", func(c *config.Fleet) { c.KubeAPIQPS = f.kubeAPIQPS }},
		{"kube-api-burst", "kubeAPIBurst", func(c *config.Fleet) { c.KubeAPIBurst = f.kubeAPIBurst }},
		{"warm-create-budget", "warmCreateBudget", func(c *config.Fleet) { c.WarmCreateBudget = &f.warmCreateBudget }},
		{"overcommit-factor", "overcommitFactor", func(c *config.Fleet) { c.OvercommitFactor = &f.overcommitFactor }},
		{"ready-timeout", "readyTimeout", func(c *config.Fleet) { c.ReadyTimeout.Duration = f.readyTimeout }},
		{"claim-grace", "claimGrace", func(c *config.Fleet) { c.ClaimGrace.Duration = f.claimGrace }},
		{"unschedulable-grace", "unschedulableGrace", func(c *config.Fleet) { c.UnschedulableGrace.Duration = f.unschedulableGrace }},
		{"controller-grace", "controllerGrace", func(c *config.Fleet) { c.ControllerGrace.Duration = f.controllerGrace }},
		{"claim-pacing", "claimPacing", func(c *config.Fleet) { c.ClaimPacing = f.claimPacing }},
		{"warm-per-task", "warmPerTask", func(c *config.Fleet) { c.WarmPerTask = f.warmPerTask }},
		{"colocate", "template.colocate", func(c *config.Fleet) { c.Template.Colocate = f.colocate }},
		{"keep-warm", "keepWarm", func(c *config.Fleet) { c.KeepWarm = f.keepWarm }},
		{"fail-fast", "failFast", func(c *config.Fleet) { c.FailFast = &f.failFast }},
		{"recycle", "recycle.enabled", func(c *config.Fleet) { c.Recycle.Enabled = f.recycle }},
		{"max-reuses", "recycle.maxReuses", func(c *config.Fleet) { c.Recycle.MaxReuses = f.maxReuses }},
		{"reset-timeout", "recycle.resetTimeout", func(c *config.Fleet) { c.Recycle.ResetTimeout.Duration = f.resetTimeout }},
		{"check-env", "recycle.checkEnv", func(c *config.Fleet) { c.Recycle.CheckEnv = f.checkEnv }},
		{"canary", "recycle.canary", func(c *config.Fleet) { c.Recycle.Canary = f.canary }},
		{"session", "session", func(c *config.Fleet) { c.Session = f.session }},
	}
}

// override sets the fields of cfg that flags given on fs name, then
// validates the configuration once, naming the flag behind each refused
// value.
func (f *Flags) override(fs *pflag.FlagSet, cfg *config.Fleet) error {
	flagOf := map[string]string{}
	for _, b := range f.bindings() {
		if fs.Changed(b.flag) {
			b.set(cfg)
			flagOf[b.path] = b.flag
		}
	}
	err := cfg.Validate()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var msgs []string
	for _, e := range errs {
		var fe *config.FieldError
		if errors.As(e, &fe) && flagOf[fe.Path] != "" {
			name := flagOf[fe.Path]
			e = fmt.Errorf("--%s %s: %s", name, fs.Lookup(name).Value, fe.Message)
		}
		msgs = append(msgs, e.Error())
	}
	return usage.Errorf("%s", strings.Join(msgs, "\n"))
}

// Targets are the clusters of the configuration file, or the current
// context's when there is none.
func Targets(configFile string, flags *genericclioptions.ConfigFlags) ([]fleet.Target, error) {
	cfg := config.Default()
	if configFile != "" {
		var err error
		if cfg, err = config.Load(configFile); err != nil {
			return nil, usage.Errorf("%w", err)
		}
	}
	return fleet.Targets(cfg, flags)
}

// PrepullHighWaterFlag is the one name of a node's disk high-water mark
// for pre-pulls, in every verb that pre-pulls.
const PrepullHighWaterFlag = "prepull-high-water"

// AddPrepullHighWater binds the --prepull-high-water flag to p, at
// nodecache.DefaultHighWaterPercent; each of aliases is a deprecated
// spelling of it that still works.
func AddPrepullHighWater(fs *pflag.FlagSet, p *int32, aliases ...string) {
	const what = "a node's disk high-water mark for pre-pulls: no pull starts once its image filesystem is this full, in percent (1-100)"
	fs.Int32Var(p, PrepullHighWaterFlag, nodecache.DefaultHighWaterPercent, what)
	for _, a := range aliases {
		fs.Int32Var(p, a, nodecache.DefaultHighWaterPercent, what)
		_ = fs.MarkDeprecated(a, "use --"+PrepullHighWaterFlag)
	}
}

// CheckPrepullHighWater refuses a high-water mark outside 1-100, naming
// the flag.
func CheckPrepullHighWater(percent int32) error {
	if err := nodecache.CheckHighWater(percent); err != nil {
		return usage.Errorf("--%s %v", PrepullHighWaterFlag, err)
	}
	return nil
}

// AddHeartbeat binds --heartbeat, how long the heartbeat Lease of what
// the verb drives (a run, a session) stays valid unrenewed, to p.
func AddHeartbeat(fs *pflag.FlagSet, p *time.Duration, driven string) {
	fs.DurationVar(p, "heartbeat", fleet.DefaultHeartbeat, fmt.Sprintf("how long the %[1]s's heartbeat Lease stays valid unrenewed; reap --orphans takes the %[1]s once it has expired (at least 1s)", driven))
}

// CheckHeartbeat refuses a --heartbeat a Lease cannot hold.
func CheckHeartbeat(d time.Duration) error {
	if err := fleet.CheckHeartbeat(d); err != nil {
		return usage.Errorf("--heartbeat %v", err)
	}
	return nil
}
