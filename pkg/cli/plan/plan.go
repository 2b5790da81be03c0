// Package plan implements `kubectl sandbox-fleet plan`: what a run of a task
// batch would warm, in which windows, and the most it would hold at once,
// computed without a cluster.
package plan

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
)

type options struct {
	streams genericiooptions.IOStreams
	inputs  inputs.Flags
	output  string
	quiet   bool
}

// NewCommand returns the plan verb.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{streams: streams}
	cmd := &cobra.Command{
		Use:   "plan --tasks FILE [flags]",
		Short: "Print what a run would warm and hold, without a cluster",
		Long: `Plan sizes a run of the task files exactly as run would — same configuration
file, same flags — and prints it without contacting a cluster: each image's
warm pool depth, the windows the strategy warms the images in, the most
sandboxes the run holds at once with the CPU, memory and image disk they take,
and warnings where the configuration works against itself.

Use it to choose a strategy and concurrency before a run, and to check that
the peak fits the cluster and the runaway breaker's ceiling.`,
		Example: `  # how a pipelined sweep of a SWE-bench batch would go at 64 tasks at once
  kubectl sandbox-fleet plan --tasks swebench.jsonl --strategy pipelined --max-concurrent 64

  # the plan of a configuration file, as JSON for a script
  kubectl sandbox-fleet plan -f fleet.yaml --tasks tasks.jsonl -o json`,
		Args: usage.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(o.output, "table", output.JSON, output.YAML); err != nil {
				return err
			}
			cfg, ts, err := o.inputs.Load(cmd.Flags(), o.streams.In)
			if err != nil {
				return err
			}
			p := fleet.NewPlan(cfg, ts)
			if o.output != "table" {
				return output.Machine(o.streams.Out, o.output, p)
			}
			return Print(o.streams.Out, p, o.quiet, output.Colors(o.streams.Out))
		},
	}
	o.inputs.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "print the summary and warnings only, not the per-image and window tables")
	return cmd
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
