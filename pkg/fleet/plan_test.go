package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// batch builds tasks from a spec like "aaaa bb c": four tasks of image a,
// two of b, one of c, in that order.
func batch(spec string) []tasks.Task {
	var ts []tasks.Task
	for _, group := range strings.Fields(spec) {
		img, n := group[:1], len(group)
		for i := range n {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("%s%d", img, i), Image: img})
		}
	}
	return ts
}

func TestNewPlan(t *testing.T) {
	// a: 6 tasks, b: 3, c: 1; at maxConcurrent 4 the pools are a 2, b 1, c 1.
	const skewed = "aaaaaa bbb c"
	for _, tt := range []struct {
		name    string
		spec    string
		cfg     func(*config.Fleet)
		windows string // images of each window, windows separated by |
		// What each window warms before it runs and lets go after it, so.
		warm, letGo string
		replicas    []int
		pods        int
		cpu, mem    string
		diskGB      float64
		warnings    int
	}{
		{name: "naive warms everything", spec: skewed,
			warm: "abc", letGo: "", windows: "abc", replicas: []int{4}, pods: 8, cpu: "2", mem: "4Gi"},
		{name: "sliding fits the budget in one window", spec: skewed, cfg: func(c *config.Fleet) { c.Strategy = "sliding" },
			warm: "abc", letGo: "", windows: "abc", replicas: []int{4}, pods: 8, cpu: "2", mem: "4Gi"},
		{name: "pipelined holds two windows", spec: skewed, cfg: func(c *config.Fleet) { c.Strategy = "pipelined"; c.Disk.AvgImageGB = 10 },
			warm: "ab|bc|c", letGo: "a|b|c", windows: "a|b|c", replicas: []int{2, 1, 1}, pods: 7, cpu: "1750m", mem: "3584Mi", diskGB: 30},
		{name: "none warms one sandbox at a time", spec: skewed, cfg: func(c *config.Fleet) { c.Strategy = "none" },
			warm: "a|b|c", letGo: "a|b|c", windows: "a|b|c", replicas: []int{1, 1, 1}, pods: 5, cpu: "1250m", mem: "2560Mi"},
		{name: "an explicit window size", spec: skewed, cfg: func(c *config.Fleet) { c.Strategy = "sliding"; c.WindowSize = 2 },
			warm: "ab|c", letGo: "ab|c", windows: "ab|c", replicas: []int{3, 1}, pods: 7, cpu: "1750m", mem: "3584Mi"},
		{name: "concurrency below the budget", spec: skewed, cfg: func(c *config.Fleet) { c.Strategy = "pipelined"; c.Concurrency = 2 },
			warm: "ab|bc|c", letGo: "a|b|c", windows: "a|b|c", replicas: []int{2, 1, 1}, pods: 5, cpu: "1250m", mem: "2560Mi"},
		{name: "fewer tasks than the concurrency", spec: "aa",
			warm: "a", letGo: "", windows: "a", replicas: []int{2}, pods: 4, cpu: "1", mem: "2Gi", warnings: 1},
		{name: "over the breaker's hard ceiling", spec: skewed, cfg: func(c *config.Fleet) { c.MaxLiveSandboxes = 6 },
			warm: "abc", letGo: "", windows: "abc", replicas: []int{4}, pods: 8, cpu: "2", mem: "4Gi", warnings: 1},
		{name: "no tasks", spec: "", warm: "", letGo: "", windows: "", pods: 0, cpu: "0", mem: "0"},
		{name: "naive over the disk warns", spec: skewed, cfg: func(c *config.Fleet) { c.Disk.AvgImageGB, c.Disk.NodeEphemeralGB, c.Disk.Nodes = 10, 25, 1 },
			warm: "abc", letGo: "", windows: "abc", replicas: []int{4}, pods: 8, cpu: "2", mem: "4Gi", diskGB: 40, warnings: 1},
		{name: "sliding fits the disk, and does not warn", spec: skewed,
			cfg: func(c *config.Fleet) {
				c.Strategy = "sliding"
				c.Disk.AvgImageGB, c.Disk.NodeEphemeralGB, c.Disk.Nodes = 10, 25, 1
			},
			warm: "a|b|c", letGo: "a|b|c", windows: "a|b|c", replicas: []int{2, 1, 1}, pods: 6, cpu: "1500m", mem: "3Gi", diskGB: 20},
		{name: "recycling warms and holds one sandbox per image", spec: skewed, cfg: func(c *config.Fleet) { c.Recycle.Enabled = true },
			warm: "abc", letGo: "", windows: "abc", replicas: []int{3}, pods: 6, cpu: "1500m", mem: "3Gi"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.MaxConcurrent = 4
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			p := NewPlan(cfg, batch(tt.spec))
			var windows, warm, letGo []string
			var replicas []int
			for _, w := range p.Windows {
				windows = append(windows, strings.Join(w.Images, ""))
				warm, letGo = append(warm, strings.Join(w.Warm, "")), append(letGo, strings.Join(w.LetGo, ""))
				replicas = append(replicas, w.Replicas)
			}
			if got := strings.Join(windows, "|"); got != tt.windows || !slices.Equal(replicas, tt.replicas) {
				t.Errorf("windows %q with replicas %v, want %q with %v", got, replicas, tt.windows, tt.replicas)
			}
			if w, l := strings.Join(warm, "|"), strings.Join(letGo, "|"); w != tt.warm || l != tt.letGo {
				t.Errorf("windows warm %q and let go %q, want %q and %q", w, l, tt.warm, tt.letGo)
			}
			if p.Peak.Pods != tt.pods || p.Peak.CPU.String() != tt.cpu || p.Peak.Memory.String() != tt.mem || p.Peak.DiskGB != tt.diskGB {
				t.Errorf("peak %d pods, %s CPU, %s memory, %g GB disk; want %d, %s, %s, %g",
					p.Peak.Pods, &p.Peak.CPU, &p.Peak.Memory, p.Peak.DiskGB, tt.pods, tt.cpu, tt.mem, tt.diskGB)
			}
			if len(p.Warnings) != tt.warnings {
				t.Errorf("warnings %q, want %d", p.Warnings, tt.warnings)
			}
		})
	}
}

// Claims scale with tasks, or under recycling with images and the uses a
// sandbox has before it rotates.
func TestPlanClaims(t *testing.T) {
	const skewed = "aaaaaa bbb c"
	for _, tt := range []struct {
		name          string
		strategy      string
		windowSize    int
		recycle       bool
		maxReuses     int
		epochs        int
		claims, fresh int
	}{
		{name: "one per task", strategy: "naive", epochs: 1, claims: 10},
		{name: "one per task and epoch", strategy: "sliding", epochs: 2, claims: 20},
		{name: "recycled: one per image", strategy: "naive", recycle: true, maxReuses: 32, epochs: 1, claims: 3, fresh: 10},
		{name: "recycled: rotated every third task", strategy: "naive", recycle: true, maxReuses: 2, epochs: 1, claims: 4, fresh: 10},
		{name: "recycled over epochs under naive", strategy: "naive", recycle: true, maxReuses: 2, epochs: 2, claims: 7, fresh: 20},
		{name: "recycled per epoch where windows unwarm", strategy: "sliding", windowSize: 1, recycle: true, maxReuses: 2, epochs: 2, claims: 8, fresh: 20},
		{name: "recycled over epochs in a single window", strategy: "sliding", recycle: true, maxReuses: 2, epochs: 2, claims: 7, fresh: 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.MaxConcurrent, cfg.Strategy, cfg.Epochs, cfg.WindowSize = 4, tt.strategy, tt.epochs, tt.windowSize
			cfg.Recycle.Enabled, cfg.Recycle.MaxReuses = tt.recycle, tt.maxReuses
			p := NewPlan(cfg, batch(skewed))
			if p.Claims != tt.claims || p.Fresh != tt.fresh || p.Recycle != tt.recycle {
				t.Errorf("claims %d (without recycling %d, recycle %v), want %d (%d, %v)", p.Claims, p.Fresh, p.Recycle, tt.claims, tt.fresh, tt.recycle)
			}
		})
	}
}

// A managed run's plan groups the tasks added so far by the windows of the
// strategy asked for, in the order they were added; a strategy or
// concurrency the configuration would refuse is refused.
func TestRunPlan(t *testing.T) {
	cfg := config.Default()
	cfg.MaxConcurrent = 4
	ts := batch("aaaaaa bbb c")
	ts[1], ts[7] = ts[7], ts[1] // b1 added before a1
	f := &Fleet{cfg: cfg, tasks: ts}
	for _, tc := range []struct {
		strategy    string
		concurrency int
		want        [][]string
	}{
		{"", 0, [][]string{{"a0", "b1", "a2", "a3", "a4", "a5", "b0", "a1", "b2", "c0"}}},
		{"none", 0, [][]string{{"a0", "a2", "a3", "a4", "a5", "a1"}, {"b1", "b0", "b2"}, {"c0"}}},
		{"pipelined", 2, [][]string{{"a0", "a2", "a3", "a4", "a5", "a1"}, {"b1", "b0", "b2"}, {"c0"}}},
	} {
		p, ids, err := f.RunPlan(tc.strategy, tc.concurrency)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(ids, tc.want, slices.Equal) || len(p.Windows) != len(ids) {
			t.Errorf("%s at %d: windows %v (plan %+v), want %v", tc.strategy, tc.concurrency, ids, p.Windows, tc.want)
		}
		if tc.concurrency > 0 && p.Concurrency != tc.concurrency {
			t.Errorf("%s at %d: plan concurrency %d", tc.strategy, tc.concurrency, p.Concurrency)
		}
	}
	for _, bad := range []struct {
		strategy    string
		concurrency int
		want        string
	}{{"eager", 0, `unknown strategy "eager"`}, {"", -1, "concurrency"}} {
		if _, _, err := f.RunPlan(bad.strategy, bad.concurrency); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("RunPlan(%q, %d) = %v, want an error with %q", bad.strategy, bad.concurrency, err, bad.want)
		}
	}
}
