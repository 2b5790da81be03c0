// Package report is a run's always-on performance record, the RunReport of
// agent-sandbox-rl: per-phase counts, totals, maxima and p50/p99, claims,
// task outcomes and warm-replica totals, printed as a table at the end of a
// run and written as JSON. Recording is safe from many goroutines.
package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Phases in lifecycle order; a report lists them so, then any others by name.
var phaseOrder = []string{"preflight", "plan", "prepull", "create_warmpool", "wait_pool_ready",
	"prefetch", "claim", "record", "process", "reset", "quarantine", "rotate", "release", "teardown"}

// Recorder collects a run's figures as it goes.
type Recorder struct {
	mu        sync.Mutex
	strategy  string
	phases    map[string][]time.Duration
	claims    int
	warmHits  int
	tasksOK   int
	tasksErr  int
	notRun    int
	reused    int
	warmTotal int
	warmNow   int
	warmPeak  int
}

// New returns a Recorder for a run with strategy.
func New(strategy string) *Recorder {
	return &Recorder{strategy: strategy, phases: map[string][]time.Duration{}}
}

// Phase records one occurrence of a phase that took d.
func (r *Recorder) Phase(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phases[name] = append(r.phases[name], d)
}

// Claim counts a claim; warm when it found a Ready sandbox and did not
// wait for one to start.
func (r *Recorder) Claim(warm bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claims++
	if warm {
		r.warmHits++
	}
}

// Task counts a finished task: ok when its work exited 0, ran when its
// work ran at all (a task that could not get a sandbox did not).
func (r *Recorder) Task(ok, ran bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case ok:
		r.tasksOK++
	case ran:
		r.tasksErr++
	default:
		r.tasksErr++
		r.notRun++
	}
}

// Reused counts a task that ran on a sandbox reset after another task.
func (r *Recorder) Reused() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reused++
}

// Warm records n replicas made warm (n > 0) or released (n < 0): the total
// ever warmed and the peak warm at once.
func (r *Recorder) Warm(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n > 0 {
		r.warmTotal += n
	}
	r.warmNow += n
	r.warmPeak = max(r.warmPeak, r.warmNow)
}

// Report is the finished record.
type Report struct {
	Strategy    string  `json:"strategy"`
	WallSeconds float64 `json:"wallSeconds"`
	Phases      []Phase `json:"phases"`
	Claims      int     `json:"claims"`
	// ClaimsWarm counts the claims that found a Ready sandbox in their
	// pool; the others waited for one to start.
	ClaimsWarm int `json:"claimsWarm"`
	TasksOK    int `json:"tasksOk"`
	TasksErr   int `json:"tasksErr"`
	// TasksNotRun counts the failed tasks whose work never ran: no
	// sandbox could be had for them. The rest exited non-zero.
	TasksNotRun int `json:"tasksNotRun"`
	// TasksReused counts the tasks that ran on a sandbox reset after
	// another task of its image (recycle); the others had a fresh one.
	TasksReused       int `json:"tasksReused,omitempty"`
	WarmReplicasTotal int `json:"warmReplicasTotal"`
	WarmReplicasPeak  int `json:"warmReplicasPeak"`
	// SandboxesPeak is the most sandboxes the run held at once — warm
	// and claimed, Pods neither finished nor being deleted — summed over
	// the clusters' peaks.
	SandboxesPeak int `json:"sandboxesPeak"`
	// Environment describes each cluster of the run, by name.
	Environment map[string]Environment `json:"environment,omitempty"`
	// Throttled is set when this client's own rate limits delayed
	// requests: the run went slower than the API server allowed.
	Throttled *Throttled `json:"clientThrottled,omitempty"`
}

// Throttled says how many requests the client-side rate limiter delayed by
// more than 50 ms, over all clusters, and by how long in all and at most.
type Throttled struct {
	Requests     int     `json:"requests"`
	TotalSeconds float64 `json:"totalSeconds"`
	MaxSeconds   float64 `json:"maxSeconds"`
}

// Environment is what a run knows of one cluster.
type Environment struct {
	Context           string   `json:"context,omitempty"`
	Server            string   `json:"server,omitempty"`
	Namespace         string   `json:"namespace"`
	KubernetesVersion string   `json:"kubernetesVersion,omitempty"`
	Nodes             int      `json:"nodes"`
	NodePools         []string `json:"nodePools,omitempty"`
	InstanceTypes     []string `json:"instanceTypes,omitempty"`
	Regions           []string `json:"regions,omitempty"`
}

// Phase summarises one phase's occurrences, in seconds.
type Phase struct {
	Name  string  `json:"name"`
	Count int     `json:"count"`
	Total float64 `json:"totalSeconds"`
	Max   float64 `json:"maxSeconds"`
	P50   float64 `json:"p50Seconds"`
	P99   float64 `json:"p99Seconds"`
}

// Report summarises what was recorded over a run that took wall.
func (r *Recorder) Report(wall time.Duration) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Strategy: r.strategy, WallSeconds: wall.Seconds(), Claims: r.claims, ClaimsWarm: r.warmHits,
		TasksOK: r.tasksOK, TasksErr: r.tasksErr, TasksNotRun: r.notRun, TasksReused: r.reused, WarmReplicasTotal: r.warmTotal, WarmReplicasPeak: r.warmPeak}
	names := make([]string, 0, len(r.phases))
	for _, n := range phaseOrder {
		if _, ok := r.phases[n]; ok {
			names = append(names, n)
		}
	}
	var others []string
	for n := range r.phases {
		if !slices.Contains(phaseOrder, n) {
			others = append(others, n)
		}
	}
	slices.Sort(others)
	for _, n := range append(names, others...) {
		rep.Phases = append(rep.Phases, summarise(n, r.phases[n]))
	}
	return rep
}

func summarise(name string, ds []time.Duration) Phase {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	p := Phase{Name: name, Count: len(sorted)}
	for _, d := range sorted {
		p.Total += d.Seconds()
	}
	if len(sorted) > 0 {
		p.Max = sorted[len(sorted)-1].Seconds()
		p.P50 = Percentile(sorted, 0.50).Seconds()
		p.P99 = Percentile(sorted, 0.99).Seconds()
	}
	return p
}

// Percentile is the nearest-rank percentile of sorted: the smallest value
// with at least q of the values at or below it.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// WriteTable prints the report for people.
func (rep Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "Run report (strategy %s)\n", rep.Strategy)
	names := slices.Sorted(maps.Keys(rep.Environment))
	for _, name := range names {
		e := rep.Environment[name]
		fmt.Fprintf(w, "  %s: server=%s namespace=%s version=%s nodes=%d", name, e.Server, e.Namespace, e.KubernetesVersion, e.Nodes)
		for _, l := range []struct {
			name   string
			values []string
		}{{"node-pools", e.NodePools}, {"instance-types", e.InstanceTypes}, {"regions", e.Regions}} {
			if len(l.values) > 0 {
				fmt.Fprintf(w, " %s=%s", l.name, strings.Join(l.values, ","))
			}
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PHASE\tCOUNT\tTOTAL\tP50\tP99\tMAX\t")
	for _, p := range rep.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%.2fs\t%.2fs\t%.2fs\t%.2fs\t\n", p.Name, p.Count, p.Total, p.P50, p.P99, p.Max)
	}
	fmt.Fprintf(tw, "wall\t\t%.2fs\t\t\t\t\n", rep.WallSeconds)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "claims %d (%d found a warm sandbox), tasks %d ok / %d failed (%d could not run), warm replicas %d in all, %d at peak, sandboxes %d at peak\n",
		rep.Claims, rep.ClaimsWarm, rep.TasksOK, rep.TasksErr, rep.TasksNotRun, rep.WarmReplicasTotal, rep.WarmReplicasPeak, rep.SandboxesPeak)
	if rep.TasksReused > 0 && err == nil {
		_, err = fmt.Fprintf(w, "recycled: %d tasks ran on a reset sandbox, %d on a fresh one\n", rep.TasksReused, rep.TasksOK+rep.TasksErr-rep.TasksNotRun-rep.TasksReused)
	}
	if t := rep.Throttled; t != nil && err == nil {
		_, err = fmt.Fprintf(w, "client-side throttling delayed %d requests, %.2fs in all, %.2fs at most: raise --kube-api-qps and --kube-api-burst\n",
			t.Requests, t.TotalSeconds, t.MaxSeconds)
	}
	return err
}
