package fleet

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/capacity"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/sizing"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// Recommendation is how `plan --probe` would run a batch on a cluster's
// nodes: the settings the model predicts finish soonest, what bounds
// them, and the plan they give.
type Recommendation struct {
	Cluster string           `json:"cluster"`
	Totals  capacity.Totals  `json:"totals"`
	Pools   []capacity.Pool  `json:"pools"`
	Limits  capacity.Limits  `json:"limits"`
	Model   capacity.Model   `json:"model"`
	Sandbox capacity.Sandbox `json:"sandbox"`
	Chosen  Scenario         `json:"chosen"`
	// Yours is the configuration as given, by the same model.
	Yours   Scenario          `json:"yours"`
	WhatIf  []Scenario        `json:"whatIf"`
	Reasons []string          `json:"reasons"`
	Config  RecommendedConfig `json:"config"`
	Plan    Plan              `json:"plan"`
}

// RecommendedConfig are the settings to run with.
type RecommendedConfig struct {
	Strategy        string  `json:"strategy"`
	MaxConcurrent   int     `json:"maxConcurrent"`
	WarmPerTask     bool    `json:"warmPerTask"`
	Colocate        bool    `json:"colocate"`
	AvgImageGB      float64 `json:"avgImageGB"`
	NodeEphemeralGB float64 `json:"nodeEphemeralGB"`
	Nodes           int     `json:"nodes"`
}

// Scenario is one strategy at one concurrency, as the model sees it.
type Scenario struct {
	Strategy    string `json:"strategy"`
	Concurrency int    `json:"concurrency"`
	// Peak is the most sandboxes its plan holds at once.
	Peak       int               `json:"peak"`
	Estimate   capacity.Estimate `json:"estimate"`
	Bottleneck string            `json:"bottleneck"`
}

// Recommend chooses, for ts under cfg (defaulted) on the probe's nodes,
// the strategy and concurrency the model says finish soonest among those
// whose peak fits the nodes: naive when every image fits their disks,
// sliding and pipelined otherwise. An RL-shaped batch (two tasks or more
// an image) warms a sandbox per task, colocated. The disk figures are the
// probe's.
func Recommend(cfg config.Fleet, ts []tasks.Task, probe capacity.Probe, m capacity.Model) (Recommendation, error) {
	if len(probe.Nodes) == 0 {
		return Recommendation{}, fmt.Errorf("cluster %s: no node matches the sandboxes' node selector: check the cluster's nodeSelector and the template's", probe.Cluster)
	}
	if len(ts) == 0 {
		return Recommendation{}, fmt.Errorf("no tasks to plan")
	}
	totals := probe.Totals()
	requests := cfg.Template.Resources.Requests
	sb := capacity.SandboxOf(requests)
	limits := capacity.NewLimits(totals, sb)
	fit, limitedBy := limits.Fit()
	r := Recommendation{Cluster: probe.Cluster, Totals: totals, Pools: probe.Pools(), Limits: limits, Model: m, Sandbox: sb}
	yours, yoursBy := NewPlan(cfg, ts), limitedBy
	if yours.Concurrency < fit {
		yoursBy = "concurrency"
	}
	r.Yours = scenario(probe, yours, cfg, ts, m, yoursBy)
	if fit < 1 {
		return r, fmt.Errorf("cluster %s: its nodes hold no sandbox of %dm CPU and %d bytes of memory (allocatable %dm, %d bytes, %d pods): lower the template's requests or select other nodes",
			probe.Cluster, sb.CPUMilli, sb.MemoryBytes, totals.CPUMilli, totals.MemoryBytes, totals.Pods)
	}

	images := imagesOf(ts)
	avg, known := imageShare(probe, m)
	cfg.Disk.AvgImageGB = round1(float64(avg) / capacity.GiB)
	cfg.Disk.NodeEphemeralGB = round1(float64(totals.DiskBytes) / float64(totals.Nodes) / capacity.GiB)
	cfg.Disk.Nodes = totals.Nodes
	cfg.Concurrency, cfg.WindowSize = 0, 0
	rl := len(ts) >= 2*len(images)
	cfg.WarmPerTask, cfg.Template.Colocate = rl, rl
	r.Reasons = append(r.Reasons,
		fmt.Sprintf("the nodes hold %s sandboxes at once by CPU, %s by memory, %d by pods: %d (%s)",
			held(limits.CPU), held(limits.Memory), limits.Pods, fit, limitedBy),
		fmt.Sprintf("an image takes %s of disk, its share of the layers the images share (%d of %d known from the nodes' caches), of %s of image disk a node",
			capacity.Bytes(avg), known, len(probe.Images), capacity.Bytes(totals.DiskBytes/int64(totals.Nodes))))
	if rl {
		r.Reasons = append(r.Reasons, fmt.Sprintf("%d tasks over %d images is RL-shaped: a sandbox warm per task, an image's replicas on one node", len(ts)*cfg.Epochs, len(images)))
	}

	candidates, plans := r.candidates(cfg, ts, probe, m, fit, limitedBy)
	if len(candidates) == 0 {
		return r, fmt.Errorf("cluster %s: no strategy's warm pools fit its nodes (%d sandboxes at once): lower maxWarmPoolSize or the template's requests", probe.Cluster, fit)
	}
	best := slices.MinFunc(candidates, func(a, b Scenario) int { return cmp.Compare(a.Estimate.Wall, b.Estimate.Wall) })
	r.Chosen, r.Plan = best, plans[best.Strategy]
	r.WhatIf = candidates
	for _, c := range []int{best.Concurrency / 2, best.Concurrency / 4} {
		if c >= 1 {
			r.WhatIf = append(r.WhatIf, scenario(probe, planWith(cfg, ts, best.Strategy, c), cfg, ts, m, "concurrency"))
		}
	}
	sort.SliceStable(r.WhatIf, func(i, j int) bool { return r.WhatIf[i].Estimate.Wall < r.WhatIf[j].Estimate.Wall })
	r.Config = RecommendedConfig{Strategy: best.Strategy, MaxConcurrent: best.Concurrency, WarmPerTask: rl, Colocate: rl,
		AvgImageGB: cfg.Disk.AvgImageGB, NodeEphemeralGB: cfg.Disk.NodeEphemeralGB, Nodes: cfg.Disk.Nodes}
	return r, nil
}

// imageShare is what an image takes on disk: its share of the probed
// images' distinct layers (they share bases, which sit on a node once), of
// the known images of the probe; the model's size when none is known.
func imageShare(probe capacity.Probe, m capacity.Model) (avg int64, known int) {
	distinct := map[string]int64{}
	for _, img := range probe.Images {
		if len(img.Layers) > 0 {
			known++
			for _, l := range img.Layers {
				distinct[l.Digest] = l.Size
			}
		}
	}
	if known == 0 {
		return m.ImageBytes, 0
	}
	var total int64
	for _, size := range distinct {
		total += size
	}
	return total / int64(known), known
}

// candidates are the strategies that warm pools, each at the largest
// concurrency whose peak fits the nodes (fit sandboxes), with their plans;
// one that warms every image at once only when they all fit the disks (a
// reason says when not).
func (r *Recommendation) candidates(cfg config.Fleet, ts []tasks.Task, probe capacity.Probe, m capacity.Model, fit int, limitedBy string) ([]Scenario, map[string]Plan) {
	images := imagesOf(ts)
	allFit := sizing.DiskWindow(images, sizingParams(cfg), diskOf(cfg), 1) >= len(images)
	var candidates []Scenario
	plans := map[string]Plan{}
	for _, strategy := range config.Strategies {
		// Single-replica pools are for runs that want no warm pools; the
		// model chooses among those that warm.
		if s, _ := config.StrategyNamed(strategy); s.OneReplica {
			continue
		} else if s.Windows == config.AllImages && !allFit {
			r.Reasons = append(r.Reasons, "not every image fits the nodes' disks at once: "+strategy+" is out")
			continue
		}
		p, ok := largestFitting(cfg, ts, strategy, min(len(ts)*cfg.Epochs, fit), fit)
		if !ok {
			continue
		}
		candidates = append(candidates, scenario(probe, p, cfg, ts, m, limitedBy))
		plans[strategy] = p
	}
	return candidates, plans
}

// largestFitting is the plan of strategy at the largest concurrency up to
// most whose peak is at most fit sandboxes, if one is.
func largestFitting(cfg config.Fleet, ts []tasks.Task, strategy string, most, fit int) (Plan, bool) {
	fits := func(c int) bool { return planWith(cfg, ts, strategy, c).Peak.Pods <= fit }
	if most < 1 || !fits(1) {
		return Plan{}, false
	}
	// The peak grows with the concurrency: the last that fits.
	c := sort.Search(most-1, func(i int) bool { return !fits(i + 2) }) + 1
	return planWith(cfg, ts, strategy, c), true
}

func planWith(cfg config.Fleet, ts []tasks.Task, strategy string, concurrency int) Plan {
	cfg.Strategy, cfg.MaxConcurrent = strategy, concurrency
	return NewPlan(cfg, ts)
}

// held says how many sandboxes the nodes hold by a resource: "any number"
// when the sandbox does not request it (capacity.NewLimits).
func held(n int) string {
	if n >= math.MaxInt32 {
		return "any number"
	}
	return strconv.Itoa(n)
}

// scenario is the model's estimate of plan p of ts at concurrency c, whose
// concurrency the nodes' limitedBy holds down.
func scenario(probe capacity.Probe, p Plan, cfg config.Fleet, ts []tasks.Task, m capacity.Model, limitedBy string) Scenario {
	replicas := map[string]capacity.WarmPool{}
	for _, pool := range p.Pools {
		replicas[pool.Image] = capacity.WarmPool(pool)
	}
	shape := capacity.Shape{Strategy: p.Strategy, Concurrency: p.Concurrency, Colocate: cfg.Template.Colocate, Epochs: cfg.Epochs}
	most := 0
	for _, w := range p.Windows {
		var window []capacity.WarmPool
		for _, img := range w.Images {
			window = append(window, replicas[img])
		}
		shape.Windows = append(shape.Windows, window)
		most = max(most, w.Tasks*cfg.Epochs)
	}
	e := capacity.Predict(probe, shape, m)
	// A window of fewer tasks than may run at once holds the concurrency
	// down: the disk does, when it sets the window.
	if most < p.Concurrency && diskBound(cfg, ts, p) {
		limitedBy = "image disk"
	}
	return Scenario{Strategy: p.Strategy, Concurrency: p.Concurrency, Peak: p.Peak.Pods, Estimate: e,
		Bottleneck: capacity.Bottleneck(e, p.Concurrency, len(ts)*cfg.Epochs, limitedBy)}
}

// diskBound reports whether the nodes' disk sets p's windows: without
// disk figures they would be fewer.
func diskBound(cfg config.Fleet, ts []tasks.Task, p Plan) bool {
	cfg.Disk.AvgImageGB = 0
	return len(planWith(cfg, ts, p.Strategy, p.Concurrency).Windows) < len(p.Windows)
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// Probe reads each target's nodes (those its sandboxes' node selector
// picks) and recommends how to run ts there, under cfg. Notes say what
// could not be read.
func Probe(ctx context.Context, cfg config.Fleet, ts []tasks.Task, targets []Target, m capacity.Model) ([]Recommendation, []string, error) {
	var out []Recommendation
	var notes []string
	for _, t := range targets {
		var images []capacity.Image
		for _, img := range imagesOf(ts) {
			images = append(images, capacity.Image{Name: img.Name, Tasks: img.Tasks})
		}
		probe, note, err := capacity.Read(ctx, t.Clients.Client, t.Config.Name, podSpec(cfg, t.Config).NodeSelector, images)
		if err != nil {
			return nil, notes, err
		}
		if note != "" {
			notes = append(notes, fmt.Sprintf("cluster %s: %s", t.Config.Name, note))
		}
		r, err := Recommend(cfg, ts, probe, m)
		if err != nil {
			return nil, notes, err
		}
		out = append(out, r)
	}
	return out, notes, nil
}
