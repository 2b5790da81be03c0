// Package plan implements `kubectl sandbox-fleet plan`: what a run of a task
// batch would warm, in which windows, and the most it would hold at once,
// computed without a cluster; and with --probe, the settings a cluster's
// nodes recommend, by a stated model of the run's wall time.
package plan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/capacity"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	inputs      inputs.Flags
	output      string
	quiet       bool
	probe       bool
	offline     bool
	bandwidth   string
	model       capacity.Model
}

// NewCommand returns the plan verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "plan --tasks FILE [flags]",
		Short: "Print what a run would warm and hold; with --probe, what a cluster's nodes recommend",
		Long: `Plan sizes a run of the task files exactly as run would — same configuration
file, same flags — and prints it, computed without a cluster: each image's
warm pool depth, the windows the strategy warms the images in, the most
sandboxes the run holds at once with the CPU, memory and image disk they take,
and warnings where the configuration works against itself.

Use it to choose a strategy and concurrency before a run, and to check that
the peak fits the cluster and the runaway breaker's ceiling.

With --probe it reads each cluster's nodes that the sandboxes' node selector
picks — allocatable CPU, memory and pods, image filesystems, and from the
NodeImageCaches what they already hold of the task images — and recommends
the strategy, concurrency and warm-pool settings that finish soonest by a
stated model: pulls (the bytes the nodes lack, at --pull-bandwidth a node),
tasks (waves of the concurrency, --task-time each) and claims (at most
--claim-rate a second). It names the bottleneck, predicts the wall time, shows
what the other choices would take, and prints the plan of the settings.

Without --probe or --offline, plan also compares the plan as configured with
what a configured, reachable cluster's nodes recommend, in two lines.`,
		Example: `  # how a pipelined sweep of a SWE-bench batch would go at 64 tasks at once
  kubectl sandbox-fleet plan --tasks swebench.jsonl --strategy pipelined --max-concurrent 64

  # the plan of a configuration file, as JSON for a script
  kubectl sandbox-fleet plan -f fleet.yaml --tasks tasks.jsonl -o json

  # what the cluster's nodes recommend for 10-minute tasks
  kubectl sandbox-fleet plan --tasks swebench.jsonl --probe --task-time 10m`,
		Args: usage.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(o.output, "table", output.JSON, output.YAML); err != nil {
				return err
			}
			if o.probe && o.offline {
				return usage.Errorf("--probe reads the cluster and --offline forbids it: give one of them")
			}
			cfg, ts, err := o.inputs.Load(cmd.Flags(), o.streams.In)
			if err != nil {
				return err
			}
			if o.probe {
				return o.runProbe(cmd.Context(), cfg, ts)
			}
			p := fleet.NewPlan(cfg, ts)
			if o.output != "table" {
				return output.Machine(o.streams.Out, o.output, p)
			}
			colors := output.Colors(o.streams.Out)
			if err := Print(o.streams.Out, p, o.quiet, colors); err != nil {
				return err
			}
			if !o.offline {
				o.assess(cmd.Context(), cfg, ts, colors)
			}
			return nil
		},
	}
	o.inputs.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "print the summary and warnings only, not the per-image and window tables")
	cmd.Flags().BoolVar(&o.probe, "probe", false, "read the clusters' nodes and recommend the settings that finish soonest; fail if they cannot be read")
	cmd.Flags().BoolVar(&o.offline, "offline", false, "contact no cluster (without it, plan compares the plan with what a reachable cluster's nodes recommend)")
	cmd.Flags().StringVar(&o.bandwidth, "pull-bandwidth", "100Mi", "when probing: what one node pulls a second, a quantity of bytes")
	cmd.Flags().DurationVar(&o.model.TaskTime, "task-time", 2*time.Minute, "when probing: how long one task runs")
	cmd.Flags().Float64Var(&o.model.ClaimsPerSecond, "claim-rate", 20, "when probing: the claims the control plane turns into sandboxes a second")
	return cmd
}

// modelOf is the wall-time model of the flags, for cfg's images.
func (o *options) modelOf(cfg config.Fleet) (capacity.Model, error) {
	bw, err := resource.ParseQuantity(o.bandwidth)
	if err != nil || bw.Value() <= 0 {
		return capacity.Model{}, usage.Errorf("--pull-bandwidth %q: want a positive quantity of bytes, such as 100Mi", o.bandwidth)
	}
	if o.model.TaskTime <= 0 || o.model.ClaimsPerSecond <= 0 {
		return capacity.Model{}, usage.Errorf("--task-time and --claim-rate must be positive")
	}
	m := o.model
	m.PullBytesPerSecond = bw.Value()
	m.ImageBytes = int64(cfg.Disk.AvgImageGB * capacity.GiB)
	if m.ImageBytes == 0 {
		m.ImageBytes = 10 * capacity.GiB
	}
	return m, nil
}

// assessTimeout bounds plan's look at a cluster it was not asked to probe.
const assessTimeout = 5 * time.Second

// assess compares, for each reachable cluster of cfg, the plan as given
// with what the cluster's nodes recommend, in a line or two. With no
// cluster configured it says nothing; a cluster that cannot be read is
// noted on stderr, and the plan stands.
func (o *options) assess(ctx context.Context, cfg config.Fleet, ts []tasks.Task, colors output.Palette) {
	m, err := o.modelOf(cfg)
	if err != nil {
		fmt.Fprintf(o.streams.ErrOut, "Warning: not comparing with the cluster: %v\n", err)
		return
	}
	targets, err := fleet.Targets(cfg, o.configFlags)
	for e := err; e != nil; e = errors.Unwrap(e) {
		if clientcmd.IsEmptyConfig(e) {
			return
		}
	}
	var recs []fleet.Recommendation
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, assessTimeout)
		defer cancel()
		recs, _, err = fleet.Probe(ctx, cfg, ts, targets, m)
	}
	if err != nil {
		fmt.Fprintf(o.streams.ErrOut, "Note: not compared with the cluster (%v); --offline skips this\n", err)
		return
	}
	for _, r := range recs {
		peak := fmt.Sprintf("its peak of %d fits the %d sandboxes the nodes hold", r.Yours.Peak, fitOf(r))
		if r.Yours.Peak > fitOf(r) {
			peak = colors.Warn(fmt.Sprintf("its peak of %d is over the %d sandboxes the nodes hold", r.Yours.Peak, fitOf(r)))
		}
		fmt.Fprintf(o.streams.Out, "\n%s %s: this plan takes about %s (bottleneck: %s); %s.\n", colors.Bold("Cluster"), r.Cluster,
			r.Yours.Estimate.Wall, r.Yours.Bottleneck, peak)
		fmt.Fprintf(o.streams.Out, "  Its nodes recommend %s at %d at once: about %s (bottleneck: %s). See plan --probe.\n",
			r.Config.Strategy, r.Config.MaxConcurrent, r.Chosen.Estimate.Wall, r.Chosen.Bottleneck)
	}
}

func fitOf(r fleet.Recommendation) int {
	n, _ := r.Limits.Fit()
	return n
}

// runProbe recommends settings for each cluster of cfg and prints them.
func (o *options) runProbe(ctx context.Context, cfg config.Fleet, ts []tasks.Task) error {
	m, err := o.modelOf(cfg)
	if err != nil {
		return err
	}
	targets, err := fleet.Targets(cfg, o.configFlags)
	if err != nil {
		return err
	}
	recs, notes, err := fleet.Probe(ctx, cfg, ts, targets, m)
	for _, n := range notes {
		fmt.Fprintf(o.streams.ErrOut, "Warning: %s\n", n)
	}
	if err != nil {
		return err
	}
	if o.output != "table" {
		return output.Machine(o.streams.Out, o.output, recs)
	}
	colors := output.Colors(o.streams.Out)
	for i, r := range recs {
		if i > 0 {
			fmt.Fprintln(o.streams.Out)
		}
		if err := PrintRecommendation(o.streams.Out, r, o.quiet, colors); err != nil {
			return err
		}
	}
	return nil
}

// PrintRecommendation writes r as human tables: the nodes by pool, the
// recommended settings with the predicted wall time and bottleneck, why,
// the other choices, and the plan of the settings.
func PrintRecommendation(w io.Writer, r fleet.Recommendation, quiet bool, colors output.Palette) error {
	fmt.Fprintf(w, "%s %s, %s (%s with a NodeImageCache)\n", colors.Bold("Cluster:"), r.Cluster,
		output.Count(r.Totals.Nodes, "node"), output.Count(r.Totals.CachedNodes, "node"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tNODES\tCPU\tMEMORY\tPODS\tIMAGE DISK\tIMAGES\tTO PULL")
	for _, p := range r.Pools {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Name, p.Nodes,
			resource.NewMilliQuantity(p.CPUMilli, resource.DecimalSI), capacity.Bytes(p.MemoryBytes), p.Pods, capacity.Bytes(p.DiskBytes),
			capacity.Bytes(p.ImageBytes), capacity.Bytes(p.ToPullBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c, e := r.Config, r.Chosen.Estimate
	fmt.Fprintf(w, "\n%s strategy %s, maxConcurrent %d, warmPerTask %v, colocate %v\n", colors.Bold("Recommended:"),
		c.Strategy, c.MaxConcurrent, c.WarmPerTask, c.Colocate)
	fmt.Fprintf(w, "%s %s: pulls %s, tasks %s, claims %s; bottleneck: %s\n", colors.Bold("Predicted wall:"),
		e.Wall, e.Pull, e.Tasks, e.Claims, r.Chosen.Bottleneck)
	fmt.Fprintf(w, "%s %s a node, %s a task, %g claims a second; unknown images %s\n", colors.Bold("Model:"),
		resource.NewQuantity(r.Model.PullBytesPerSecond, resource.BinarySI).String()+"/s", r.Model.TaskTime, r.Model.ClaimsPerSecond, capacity.Bytes(r.Model.ImageBytes))
	for _, reason := range r.Reasons {
		fmt.Fprintf(w, "  - %s\n", reason)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "STRATEGY\tCONCURRENCY\tPEAK\tWALL\tPULLS\tTASKS\tCLAIMS\tBOTTLENECK")
	row := func(s fleet.Scenario, name string) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", name, s.Concurrency, s.Peak, s.Estimate.Wall, s.Estimate.Pull,
			s.Estimate.Tasks, s.Estimate.Claims, s.Bottleneck)
	}
	for _, s := range r.WhatIf {
		row(s, s.Strategy)
	}
	row(r.Yours, r.Yours.Strategy+" (configured)")
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return Print(w, r.Plan, quiet, colors)
}

// Print writes p as human tables: a summary, the windows, every image's
// pool, the peak and the warnings.
func Print(w io.Writer, p fleet.Plan, quiet bool, colors output.Palette) error {
	fmt.Fprintf(w, "%s %s over %s, strategy %s, %d at once, %s\n", colors.Bold("Plan:"), output.Count(p.Tasks, "task"),
		output.Count(len(p.Pools), "image"), p.Strategy, p.Concurrency, output.Count(p.Epochs, "epoch"))
	peak := fmt.Sprintf("%d sandboxes, %s CPU, %s memory", p.Peak.Pods, &p.Peak.CPU, &p.Peak.Memory)
	if p.Peak.DiskGB > 0 {
		peak += fmt.Sprintf(", up to %s GB of images", strconv.FormatFloat(p.Peak.DiskGB, 'f', -1, 64))
	}
	fmt.Fprintf(w, "%s %s\n", colors.Bold("Peak:"), peak)
	fmt.Fprintf(w, "%s %s; every pool warm at once would be %s\n",
		colors.Bold("Warm:"), output.Count(len(p.Windows), "window"), output.Count(p.WarmFootprint, "sandbox"))
	claims := fmt.Sprintf("%d, one per task", p.Claims)
	if p.Recycle {
		claims = fmt.Sprintf("%d, recycled: an image's tasks share a sandbox, reset between them (%d without recycling; each failed reset adds one)", p.Claims, p.Fresh)
	}
	fmt.Fprintf(w, "%s %s\n", colors.Bold("Claims:"), claims)

	if !quiet {
		windowOf := map[string]int{}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WINDOW\tIMAGES\tTASKS\tREPLICAS")
		for i, win := range p.Windows {
			for _, img := range win.Images {
				windowOf[img] = i + 1
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\n", i+1, len(win.Images), win.Tasks, win.Replicas)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "IMAGE\tTASKS\tREPLICAS\tWINDOW")
		for _, pool := range p.Pools {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", pool.Image, pool.Tasks, pool.Replicas, windowOf[pool.Image])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Warnings) > 0 {
		fmt.Fprintln(w)
		for _, warning := range p.Warnings {
			fmt.Fprintf(w, "%s %s\n", colors.Warn("Warning:"), warning)
		}
	}
	return nil
}
