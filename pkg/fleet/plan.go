package fleet

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/sizing"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// Plan is what a run of a task batch does under a configuration, decided
// from plain data before anything is created: each image's pool, the
// windows the strategy warms them in, and the most the run holds at once.
// `kubectl sandbox-fleet plan` prints it; Run follows it; the runaway
// breaker's expectation is its peak.
type Plan struct {
	// Pools are the warm pools, one per image, as the strategy warms them.
	Pools []PoolPlan `json:"pools"`
	// WarmFootprint is how many sandboxes are warm when every pool is:
	// the naive strategy's peak.
	WarmFootprint int `json:"warmFootprint"`
	// SlidingWindow and PipelinedWindow are how many images the sliding
	// and pipelined strategies warm together.
	SlidingWindow   int `json:"slidingWindow"`
	PipelinedWindow int `json:"pipelinedWindow"`
	// Warnings say where the configuration works against itself.
	Warnings    []string `json:"warnings,omitempty"`
	Strategy    string   `json:"strategy"`
	Tasks       int      `json:"tasks"`
	Epochs      int      `json:"epochs"`
	Concurrency int      `json:"concurrency"`
	// Windows are the groups of images warm together, in run order. The
	// pipelined strategy warms the next window while one runs.
	Windows []Window `json:"windows"`
	Peak    Peak     `json:"peak"`
	// Claims is how many sandboxes the run claims, at the least: one per
	// task, or under recycling one per image and maxReuses+1 of its tasks
	// (quarantines add one each). Fresh is the count without recycling.
	Claims  int  `json:"claims"`
	Fresh   int  `json:"claimsWithoutRecycling,omitempty"`
	Recycle bool `json:"recycle,omitempty"`
}

// PoolPlan is one image's warm pool: the image, its tasks and the
// replicas warmed for them.
type PoolPlan struct {
	Image    string `json:"image"`
	Tasks    int    `json:"tasks"`
	Replicas int    `json:"replicas"`
}

// Window is a group of images warm together, and what the strategy does
// around it: what a runner asks to warm before its tasks run, and what it
// lets go once they are done. A runner that does what each window says
// runs the strategy (the Python client's does).
type Window struct {
	Images   []string `json:"images"`
	Tasks    int      `json:"tasks"`
	Replicas int      `json:"replicas"`
	// Warm are the images asked for before the window's tasks run: its
	// own, and under a strategy that warms ahead the next window's too.
	Warm []string `json:"warm"`
	// LetGo are the images whose pools go once the window's tasks are
	// done (config.Strategy.LetsGo).
	LetGo []string `json:"letGo,omitempty"`
}

// Peak is the most the run holds at once: the sandboxes of the windows
// warm together plus one claimed sandbox per task in flight (a pool refills
// what is claimed from it), and what they request.
type Peak struct {
	Pods   int               `json:"pods"`
	CPU    resource.Quantity `json:"cpu"`
	Memory resource.Quantity `json:"memory"`
	// DiskGB bounds the image bytes the peak's sandboxes pull, at
	// disk.avgImageGB per replica as sizing counts it; 0 when unknown.
	DiskGB float64 `json:"diskGB,omitempty"`
}

// NewPlan plans a run of ts under cfg, which must be defaulted.
func NewPlan(cfg config.Fleet, ts []tasks.Task) Plan { return newPlan(cfg, ts, cfg.Recycle.Enabled) }

// newPlan plans ts; serial says that an image's tasks run one at a time on
// one sandbox, reset between them (a recycled run). A session recycles
// too, but its trainer acquires an image's sandboxes side by side, so its
// pools are sized as without recycling.
func newPlan(cfg config.Fleet, ts []tasks.Task, serial bool) Plan {
	images := imagesOf(ts)
	sized := sizing.NewPlan(images, sizingParams(cfg), diskOf(cfg))
	p := Plan{
		SlidingWindow:   sized.SlidingWindow,
		PipelinedWindow: sized.PipelinedWindow,
		Warnings:        sized.Warnings,
		Strategy:        cfg.Strategy,
		Tasks:           len(ts),
		Epochs:          cfg.Epochs,
		Concurrency:     concurrency(cfg),
	}
	// The strategy may warm less than sizing asks: the plan says what is
	// warmed.
	planned := map[string]PoolPlan{}
	names := make([]string, len(sized.Pools))
	for i, sp := range sized.Pools {
		pool := PoolPlan{Image: sp.Image, Tasks: sp.Tasks, Replicas: depth(cfg, serial, sp.Replicas, sp.Tasks)}
		p.Pools = append(p.Pools, pool)
		p.WarmFootprint += pool.Replicas
		planned[pool.Image] = pool
		names[i] = pool.Image
	}
	strategy := cfg.Warming()
	groups := chunk(names, windowSize(cfg, p, len(names)))
	for i, group := range groups {
		w := Window{Images: group, Warm: group}
		for _, img := range group {
			w.Tasks += planned[img].Tasks
			w.Replicas += planned[img].Replicas
		}
		if strategy.Ahead && i+1 < len(groups) {
			w.Warm = append(slices.Clip(group), groups[i+1]...)
		}
		if strategy.LetsGo(len(groups)) {
			w.LetGo = group
		}
		p.Windows = append(p.Windows, w)
	}

	// The most warm at once: a window, and the next one warming beside it
	// under a strategy that warms ahead.
	warm := 0
	for i, w := range p.Windows {
		at := w.Replicas
		if strategy.Ahead && i+1 < len(p.Windows) {
			at += p.Windows[i+1].Replicas
		}
		warm = max(warm, at)
	}
	// Under recycling an image's tasks run one at a time.
	inFlight := min(p.Concurrency, len(ts))
	p.Claims = len(ts) * cfg.Epochs
	if serial {
		inFlight = min(inFlight, len(images))
		p.Recycle, p.Fresh, p.Claims = true, p.Claims, recycledClaims(cfg, images, !strategy.LetsGo(len(groups)))
	}
	p.Peak.Pods = warm + inFlight
	requests := cfg.Template.Resources.Requests
	p.Peak.CPU = times(requests[corev1.ResourceCPU], p.Peak.Pods)
	p.Peak.Memory = times(requests[corev1.ResourceMemory], p.Peak.Pods)
	p.Peak.DiskGB = float64(warm) * cfg.Disk.AvgImageGB
	if d := diskOf(cfg); strategy.Windows == config.AllImages && d.AvgImageGB > 0 && d.UsableGB > 0 {
		if fit := sizing.DiskWindow(images, sizingParams(cfg), d, 1); fit < len(images) {
			p.Warnings = append(p.Warnings, fmt.Sprintf(
				"only %d of %d images fit the nodes' disk at once, and %s warms them all: use the sliding or pipelined strategy", fit, len(images), strategy.Name))
		}
	}
	if limit := cfg.MaxLiveSandboxes; limit > 0 && p.Peak.Pods > limit {
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"the run holds up to %d sandboxes at once but maxLiveSandboxes is %d: the runaway breaker would stop it; raise maxLiveSandboxes or lower maxConcurrent and concurrency",
			p.Peak.Pods, limit))
	}
	return p
}

// recycledClaims is how many sandboxes a recycled run of images claims
// when no reset fails: each serves maxReuses+1 tasks of its image. Where
// pools are kept between epochs (kept) a sandbox goes on to the next
// epoch; elsewhere an image's window is let go, and its sandbox released,
// when the window ends.
func recycledClaims(cfg config.Fleet, images []sizing.Image, kept bool) int {
	uses := cfg.Recycle.MaxReuses + 1
	n := 0
	for _, img := range images {
		if kept {
			n += ceilDiv(img.Tasks*cfg.Epochs, uses)
		} else {
			n += cfg.Epochs * ceilDiv(img.Tasks, uses)
		}
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func times(q resource.Quantity, n int) resource.Quantity {
	out := q.DeepCopy()
	out.Mul(int64(n))
	return out
}

func sizingParams(cfg config.Fleet) sizing.Params {
	return sizing.Params{MaxConcurrent: cfg.Budget(), MaxWarmPoolSize: cfg.MaxWarmPoolSize, WarmPerTask: cfg.WarmPerTask}
}

func diskOf(cfg config.Fleet) sizing.Disk {
	d := cfg.Disk
	return sizing.Disk{AvgImageGB: d.AvgImageGB, UsableGB: d.NodeEphemeralGB * (1 - *d.Headroom), Nodes: d.Nodes}
}

// depth is the depth of a pool planned at planned sandboxes when left of
// its tasks remain: one under a strategy of single-replica pools (none)
// and when the image's tasks
// run serially on one recycled sandbox (the pool refills for a rotation or
// a quarantine), and never more than the tasks left, which a resumed run
// may have few of.
func depth(cfg config.Fleet, serial bool, planned, left int) int {
	if cfg.Warming().OneReplica || serial {
		return 1
	}
	return max(1, min(planned, left))
}

// concurrency is how many tasks run at once.
func concurrency(cfg config.Fleet) int {
	if cfg.Concurrency > 0 {
		return cfg.Concurrency
	}
	return cfg.Budget()
}

// windowSize is how many of images a strategy keeps warm at once.
func windowSize(cfg config.Fleet, plan Plan, images int) int {
	s := cfg.Warming()
	switch {
	case s.Windows == config.AllImages:
		return max(1, images)
	case s.Windows == config.OneImage:
		return 1
	case cfg.WindowSize > 0:
		return cfg.WindowSize
	case s.Ahead:
		return plan.PipelinedWindow
	default:
		return plan.SlidingWindow
	}
}

func chunk(names []string, size int) [][]string {
	var out [][]string
	for len(names) > 0 {
		n := min(size, len(names))
		out = append(out, names[:n])
		names = names[n:]
	}
	return out
}
