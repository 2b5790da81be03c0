// Package inputs reads what a run is made of — the fleet configuration,
// the flags that override it and the task files — for the verbs that plan
// or start one. Everything is checked here, before anything is created, and
// every problem is a usage error that says where it is.
package inputs

import (
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
	unschedulableGrace                  time.Duration
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
	fs.StringVarP(&f.ConfigFile, "config", "f", "", "fleet configuration file (see examples/fleet.yaml); flags override it")
	fs.StringVar(&f.strategy, "strategy", "", "when pools are warm: "+strings.Join(config.Strategies, ", ")+" (default naive)")
	fs.StringVar(&f.placement, "placement", "", "how pools spread over clusters: "+strings.Join(config.Placements, ", "))
	fs.IntVar(&f.concurrency, "concurrency", 0, "tasks at once (default: --max-concurrent)")
	fs.IntVar(&f.maxConcurrent, "max-concurrent", 0, "concurrency budget that sizes the warm pools (default: --concurrency, else 1)")
	fs.IntVar(&f.maxWarmPoolSize, "max-warmpool-size", 0, "cap on any one pool (default 8)")
	fs.BoolVar(&f.warmPerTask, "warm-per-task", false, "warm one sandbox per task, up to the cap, for instant claims")
	fs.BoolVar(&f.colocate, "colocate", false, "prefer one node for all replicas of a pool, so that one node pulls its image")
	fs.IntVar(&f.windowSize, "window-size", 0, "images warm at once for sliding and pipelined (default: sized from the budget and disk)")
	fs.IntVar(&f.epochs, "epochs", 0, "passes over the tasks, pools kept warm between them (default 1)")
	fs.BoolVar(&f.keepWarm, "keep-warm", false, "leave the pools warm at the end; tear them down with: teardown --run-id ID")
	fs.IntVar(&f.warmCreateBudget, "warm-create-budget", 0, "fill pools in waves of at most this many creates; 0 = all at once (default 1000)")
	fs.DurationVar(&f.readyTimeout, "ready-timeout", 0, "how long a pool may take to be ready (default 15m)")
	fs.StringVar(&f.claimPacing, "claim-pacing", "", "none: claim at once; warm: claim only while the pool has a free Ready sandbox (default none)")
	fs.DurationVar(&f.claimGrace, "claim-grace", 0, "how long a sandbox may back off (image pull, crash loop) before it is given up (default 2m)")
	fs.DurationVar(&f.unschedulableGrace, "unschedulable-grace", 0, "how long a sandbox may wait for a node with room before it is given up (default 10m)")
	fs.BoolVar(&f.failFast, "fail-fast", true, "give up sandboxes in trouble after the graces; false waits out --ready-timeout")
	fs.Float64Var(&f.overcommitFactor, "overcommit-factor", 0, "runaway breaker: tear down above expected × this; 0 = off (default 1.5)")
	fs.IntVar(&f.maxLiveSandboxes, "max-live-sandboxes", 0, "runaway breaker: absolute ceiling of live sandboxes")
	fs.Float32Var(&f.kubeAPIQPS, "kube-api-qps", 0, fmt.Sprintf("requests a second to each API server, on average (default %d)", kube.DefaultQPS))
	fs.IntVar(&f.kubeAPIBurst, "kube-api-burst", 0, fmt.Sprintf("requests to each API server at once (default %d)", kube.DefaultBurst))
	fs.BoolVar(&f.recycle, "recycle", false, "reset a sandbox in place after a task and run the next task of its image in it, instead of a fresh claim per task")
	fs.IntVar(&f.maxReuses, "max-reuses", 0, "with --recycle, resets a sandbox takes before a fresh one replaces it (default 32)")
	fs.DurationVar(&f.resetTimeout, "reset-timeout", 0, "with --recycle, bound on a reset; a slower one quarantines the sandbox (default 1m)")
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

// override applies the flags given on the command line over cfg.
func (f *Flags) override(fs *pflag.FlagSet, cfg *config.Fleet) error {
	set := fs.Changed
	if set("strategy") {
		if !slices.Contains(config.Strategies, f.strategy) {
			return usage.Errorf("--strategy %q: use one of %s", f.strategy, strings.Join(config.Strategies, ", "))
		}
		cfg.Strategy = f.strategy
	}
	if set("placement") {
		if !slices.Contains(config.Placements, f.placement) {
			return usage.Errorf("--placement %q: use one of %s", f.placement, strings.Join(config.Placements, ", "))
		}
		cfg.Placement = f.placement
	}
	ints := []struct {
		flag   string
		value  int
		target *int
		least  int
	}{
		{"concurrency", f.concurrency, &cfg.Concurrency, 0},
		{"max-concurrent", f.maxConcurrent, &cfg.MaxConcurrent, 1},
		{"max-warmpool-size", f.maxWarmPoolSize, &cfg.MaxWarmPoolSize, 1},
		{"window-size", f.windowSize, &cfg.WindowSize, 0},
		{"epochs", f.epochs, &cfg.Epochs, 1},
		{"max-live-sandboxes", f.maxLiveSandboxes, &cfg.MaxLiveSandboxes, 0},
		{"kube-api-burst", f.kubeAPIBurst, &cfg.KubeAPIBurst, 1},
		{"max-reuses", f.maxReuses, &cfg.Recycle.MaxReuses, 1},
	}
	for _, i := range ints {
		if !set(i.flag) {
			continue
		}
		if i.value < i.least {
			return usage.Errorf("--%s %d: must be at least %d", i.flag, i.value, i.least)
		}
		*i.target = i.value
	}
	if set("kube-api-qps") {
		if f.kubeAPIQPS <= 0 {
			return usage.Errorf("--kube-api-qps %g: must be positive", f.kubeAPIQPS)
		}
		cfg.KubeAPIQPS = f.kubeAPIQPS
	}
	if set("warm-create-budget") {
		if f.warmCreateBudget < 0 {
			return usage.Errorf("--warm-create-budget %d: must not be negative (0 fills every pool at once)", f.warmCreateBudget)
		}
		cfg.WarmCreateBudget = &f.warmCreateBudget
	}
	if set("overcommit-factor") {
		if f.overcommitFactor != 0 && f.overcommitFactor < 1 {
			return usage.Errorf("--overcommit-factor %g: must be at least 1, or 0 to turn the breaker off", f.overcommitFactor)
		}
		cfg.OvercommitFactor = &f.overcommitFactor
	}
	for _, d := range []struct {
		flag   string
		value  time.Duration
		target *time.Duration
	}{{"ready-timeout", f.readyTimeout, &cfg.ReadyTimeout.Duration}, {"claim-grace", f.claimGrace, &cfg.ClaimGrace.Duration},
		{"unschedulable-grace", f.unschedulableGrace, &cfg.UnschedulableGrace.Duration},
		{"reset-timeout", f.resetTimeout, &cfg.Recycle.ResetTimeout.Duration}} {
		if !set(d.flag) {
			continue
		}
		if d.value <= 0 {
			return usage.Errorf("--%s %s: must be positive", d.flag, d.value)
		}
		*d.target = d.value
	}
	if set("claim-pacing") {
		if f.claimPacing != "warm" && f.claimPacing != "none" {
			return usage.Errorf("--claim-pacing %q: use warm or none", f.claimPacing)
		}
		cfg.ClaimPacing = f.claimPacing
	}
	if set("warm-per-task") {
		cfg.WarmPerTask = f.warmPerTask
	}
	if set("colocate") {
		cfg.Template.Colocate = f.colocate
	}
	if set("keep-warm") {
		cfg.KeepWarm = f.keepWarm
	}
	if set("fail-fast") {
		cfg.FailFast = &f.failFast
	}
	if set("recycle") {
		cfg.Recycle.Enabled = f.recycle
	}
	if set("check-env") {
		cfg.Recycle.CheckEnv = f.checkEnv
	}
	if set("canary") {
		cfg.Recycle.Canary = f.canary
	}
	if set("session") {
		cfg.Session = f.session
	}
	return nil
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
