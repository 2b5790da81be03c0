// Package loadtest runs one synthetic batch — a few images, a few tasks of
// each, every task holding its sandbox for a set time — under several
// strategies and concurrencies, one whole fleet run after another on the
// same clusters, and compares them: wall time, how long tasks waited for a
// sandbox, the share that found one warm, claims a second, the most
// sandboxes held at once and the API requests a task cost. Each run is torn
// down before the next starts, so every run begins from an empty namespace
// (but for the images its nodes pulled for the runs before).
package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// Batch is the synthetic batch every run does.
type Batch struct {
	// Images names the images. One name with {i} in it is a template for
	// Count images: {i} is replaced by 0, 1, ... and {i:03d} by the same,
	// zero-padded to 3 digits. Names without {i} are the images
	// themselves.
	Images []string
	// Count is how many images a template makes; 0 is one. Without a
	// template it is 0 or the number of names.
	Count         int
	TasksPerImage int
}

var index = regexp.MustCompile(`\{i(?::0(\d)d)?\}`)

// Tasks returns TasksPerImage tasks of each image, with ids img0000-t0,
// img0000-t1, ..., the images rewritten by rewrite as a run's would be.
func (b Batch) Tasks(rewrite []images.Rule) ([]tasks.Task, error) {
	if len(b.Images) == 0 || b.TasksPerImage < 1 {
		return nil, fmt.Errorf("%d images of %d tasks each: both must be at least 1", len(b.Images), b.TasksPerImage)
	}
	names := b.Images
	templated := slices.ContainsFunc(names, index.MatchString)
	switch {
	case templated && len(names) > 1:
		return nil, fmt.Errorf("images %q: give either one name with {i} or names without", names)
	case templated:
		names = nil
		for i := range max(b.Count, 1) {
			names = append(names, index.ReplaceAllStringFunc(b.Images[0], func(m string) string {
				width, _ := strconv.Atoi(index.FindStringSubmatch(m)[1])
				return fmt.Sprintf("%0*d", width, i)
			}))
		}
	case len(names) == 1 && b.Count > 1:
		return nil, fmt.Errorf("image %q has no {i}: its %d images would all be one; e.g. registry.example.com/bench:img{i:03d}", names[0], b.Count)
	case b.Count != 0 && b.Count != len(names):
		return nil, fmt.Errorf("%d images asked for, %d named", b.Count, len(names))
	}
	var ts []tasks.Task
	for i, image := range names {
		for k := range b.TasksPerImage {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("img%04d-t%d", i, k), Image: image})
		}
	}
	return tasks.Check("--image", ts, map[string]string{}, rewrite)
}

// Mode is how a run gives its tasks sandboxes: a strategy, and whether a
// sandbox is reset and reused for the next task of its image (recycling,
// the reference load test's "reuse").
type Mode struct {
	Strategy string `json:"strategy"`
	Recycle  bool   `json:"recycle,omitempty"`
}

// recycled is the suffix of a recycling mode's name.
const recycled = "+recycle"

// Name names the mode as --strategies does: "pipelined", or
// "pipelined+recycle".
func (m Mode) Name() string {
	if m.Recycle {
		return m.Strategy + recycled
	}
	return m.Strategy
}

// ParseModes reads --strategies: strategies of config.Strategies, each
// recycling when it ends in "+recycle", or "all", every strategy without
// recycling (which is opt-in, as in the reference). recycleAll makes
// every mode recycle (recycling on in the configuration). A mode named
// twice runs twice: the first run may be the only one to pull.
func ParseModes(names []string, recycleAll bool) ([]Mode, error) {
	if slices.Equal(names, []string{"all"}) {
		names = config.Strategies
	}
	var modes []Mode
	for _, name := range names {
		strategy, recycle := strings.CutSuffix(name, recycled)
		if !slices.Contains(config.Strategies, strategy) {
			return nil, fmt.Errorf("unknown strategy %q: use %s, each with +recycle to reset and reuse sandboxes (e.g. pipelined+recycle), or all",
				strategy, strings.Join(config.Strategies, ", "))
		}
		modes = append(modes, Mode{Strategy: strategy, Recycle: recycle || recycleAll})
	}
	return modes, nil
}

// Cell is one run of the load test: a mode at a concurrency.
type Cell struct {
	Mode
	Concurrency int `json:"concurrency"`
}

// Cells lists each mode at each concurrency, mode by mode.
func Cells(modes []Mode, concurrencies []int) []Cell {
	var cells []Cell
	for _, m := range modes {
		for _, c := range concurrencies {
			cells = append(cells, Cell{Mode: m, Concurrency: c})
		}
	}
	return cells
}

// Name names the cell in messages: "pipelined+recycle at concurrency 4".
func (c Cell) Name() string { return fmt.Sprintf("%s at concurrency %d", c.Mode.Name(), c.Concurrency) }

// RunID is the id of the n-th run (from 0) of the load test prefix, in
// cell: the prefix, n+1, the strategy, "recycle" when it recycles, and
// the concurrency.
func RunID(prefix string, n int, cell Cell) string {
	return fmt.Sprintf("%s-%d-%s-c%d", prefix, n+1, strings.ReplaceAll(cell.Mode.Name(), "+", "-"), cell.Concurrency)
}

// Hold is work that holds the sandbox for d and runs nothing in it.
func Hold(d time.Duration) fleet.Work {
	return func(ctx context.Context, _ tasks.Task, _ *fleet.Sandbox) (fleet.Output, error) {
		select {
		case <-time.After(d):
			return fleet.Output{}, nil
		case <-ctx.Done():
			return fleet.Output{}, context.Cause(ctx)
		}
	}
}

// SleepIn is work that runs sleep for d in the sandbox.
func SleepIn(d time.Duration) fleet.Work {
	return fleet.ExecWork([]string{"sleep", strconv.FormatFloat(d.Seconds(), 'f', -1, 64)}, nil)
}

// Row is what one run measured.
type Row struct {
	Cell
	RunID       string  `json:"runId"`
	WallSeconds float64 `json:"wallSeconds"`
	// TimeToSandbox is how long the tasks that got a sandbox waited for
	// it, p50 and p99 (nearest rank), in seconds.
	TimeToSandboxP50 float64 `json:"timeToSandboxP50Seconds"`
	TimeToSandboxP99 float64 `json:"timeToSandboxP99Seconds"`
	// WarmShare is the share of tasks that did not wait for a sandbox to
	// start: their claim found a Ready one, or they ran on a recycled one.
	WarmShare float64 `json:"warmShare"`
	// ClaimsPerSecond is the run's claims over its wall time.
	ClaimsPerSecond float64 `json:"claimsPerSecond"`
	// PeakSandboxes is the most sandboxes the run held at once.
	PeakSandboxes int `json:"peakSandboxes"`
	// RequestsPerTask is every request the run sent to the API servers —
	// preflight, warming, claims, watches, execs, teardown — over its tasks.
	RequestsPerTask float64 `json:"requestsPerTask"`
	OK              int     `json:"ok"`
	Tasks           int     `json:"tasks"`
	// Error says why the run stopped short, when it did.
	Error  string         `json:"error,omitempty"`
	Report *report.Report `json:"report,omitempty"`
}

// Measure makes the row of a run from its report, its results and the
// API requests it sent.
func Measure(cell Cell, rep report.Report, results []fleet.Result, requests int64) Row {
	row := Row{Cell: cell, WallSeconds: rep.WallSeconds, PeakSandboxes: rep.SandboxesPeak, Tasks: len(results), Report: &rep}
	var waits []time.Duration
	warm := 0
	for _, r := range results {
		if r.OK {
			row.OK++
		}
		if r.Warm {
			warm++
		}
		if r.Sandbox != "" {
			waits = append(waits, time.Duration(r.Phases["claim"]*float64(time.Second)))
		}
	}
	slices.Sort(waits)
	if len(waits) > 0 {
		row.TimeToSandboxP50 = report.Percentile(waits, 0.50).Seconds()
		row.TimeToSandboxP99 = report.Percentile(waits, 0.99).Seconds()
	}
	if len(results) > 0 {
		row.WarmShare = float64(warm) / float64(len(results))
		row.RequestsPerTask = float64(requests) / float64(len(results))
	}
	if rep.WallSeconds > 0 {
		row.ClaimsPerSecond = float64(rep.Claims) / rep.WallSeconds
	}
	return row
}

// Options say what the load test runs and where it says how it goes.
type Options struct {
	// Config is the fleet configuration every run starts from; each
	// cell sets its strategy and concurrency.
	Config config.Fleet
	Tasks  []tasks.Task
	Cells  []Cell
	Work   fleet.Work
	// RunID prefixes each run's id, which ends in the cell.
	RunID string
	// Heartbeat is how long a run's heartbeat Lease stays valid
	// unrenewed, so that `reap --orphans` takes a killed load test's run
	// (0: the engine's default).
	Heartbeat time.Duration
	// Started and Finished, when set, are told of each run, Started with
	// its id.
	Started  func(Cell, string)
	Finished func(Row)
}

// Run does the cells one after another on targets and returns a row per
// cell run. A run that fails is a row with its error, and the load test
// goes on; one that cannot start (preflight, bad configuration) or an
// ended ctx stops it.
func Run(ctx context.Context, targets []fleet.Target, o Options) ([]Row, error) {
	var rows []Row
	for i, cell := range o.Cells {
		row, err := runCell(ctx, targets, o, RunID(o.RunID, i, cell), cell)
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
		if o.Finished != nil {
			o.Finished(row)
		}
		if ctx.Err() != nil {
			return rows, context.Cause(ctx)
		}
	}
	return rows, nil
}

func runCell(ctx context.Context, targets []fleet.Target, o Options, runID string, cell Cell) (Row, error) {
	cfg := o.Config
	cfg.Strategy, cfg.Concurrency, cfg.MaxConcurrent = cell.Strategy, cell.Concurrency, cell.Concurrency
	cfg.Recycle.Enabled = cell.Recycle
	before := requests(targets)
	f, err := fleet.Open(ctx, runID, cfg, o.Tasks, targets, fleet.WithHeartbeat("loadtest", o.Heartbeat))
	if err != nil {
		return Row{}, fmt.Errorf("%s: %w", cell.Name(), err)
	}
	defer f.Close()
	if o.Started != nil {
		o.Started(cell, runID)
	}
	var results []fleet.Result
	rep, runErr := f.Run(ctx, fleet.RunOptions{Work: o.Work, OnResult: func(r fleet.Result) { results = append(results, r) }})
	if errors.Is(runErr, fleet.ErrNothingCreated) {
		return Row{}, runErr
	}
	row := Measure(cell, rep, results, requests(targets)-before)
	row.RunID, row.Tasks = runID, len(o.Tasks)
	if runErr != nil {
		row.Error = runErr.Error()
	}
	return row, nil
}

// requests sums what the targets' clients have sent so far.
func requests(targets []fleet.Target) int64 {
	var n int64
	for _, t := range targets {
		n += t.Clients.Requests.Count()
	}
	return n
}

// WriteTable prints the rows as one comparison table, then each failed
// run's error.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STRATEGY\tCONCURRENCY\tWALL\tTO SANDBOX P50\tP99\tWARM\tCLAIMS/S\tPEAK SANDBOXES\tREQUESTS/TASK\tOK\t")
	var failed []string
	for _, r := range rows {
		if r.Report == nil {
			fmt.Fprintf(tw, "%s\t%d\t-\t-\t-\t-\t-\t-\t-\t0/%d\t\n", r.Mode.Name(), r.Concurrency, r.Tasks)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%.1fs\t%.2fs\t%.2fs\t%.0f%%\t%.1f\t%d\t%.1f\t%d/%d\t\n", r.Mode.Name(), r.Concurrency, r.WallSeconds,
				r.TimeToSandboxP50, r.TimeToSandboxP99, 100*r.WarmShare, r.ClaimsPerSecond, r.PeakSandboxes, r.RequestsPerTask, r.OK, r.Tasks)
		}
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("%s: %s", r.Cell.Name(), r.Error))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(failed) > 0 {
		_, err := fmt.Fprintf(w, "\n%s\n", strings.Join(failed, "\n"))
		return err
	}
	return nil
}
