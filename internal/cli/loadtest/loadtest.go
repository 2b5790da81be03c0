// Package loadtest implements `kubectl sandbox-fleet loadtest`: one
// synthetic batch run under several strategies and concurrencies, one
// after another on the user's cluster, compared in one table.
package loadtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/interrupt"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/runid"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/internal/loadtest"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	inputs      inputs.Flags

	batch         loadtest.Batch
	taskTime      time.Duration
	strategies    []string
	concurrencies []int
	process       string
	runID, output string

	// Filled in by complete.
	cfg   config.Fleet
	tasks []tasks.Task
	cells []loadtest.Cell
}

// NewCommand returns the loadtest verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "loadtest --image IMAGE [--images N] [--tasks-per-image K] [flags]",
		Short: "Run one synthetic batch under several strategies and concurrencies and compare them",
		Long: `Loadtest makes a batch of images with --tasks-per-image tasks each, in
which every task holds its sandbox for --task-time, and runs it once for each
strategy of --strategies at each concurrency of --concurrency, one run after
another, each torn down before the next starts. It prints one table:

  WALL            the run's wall time, from warming to teardown
  TO SANDBOX      how long tasks waited for a sandbox, p50 and p99
  WARM            the share of tasks that found a Ready sandbox (or, when
                  recycling, reused one) and did not wait for one to start
  CLAIMS/S        claims over the wall time
  PEAK SANDBOXES  the most sandboxes held at once, warm and claimed
  REQUESTS/TASK   every request sent to the API server, over the tasks
  OK              tasks whose work ran and exited 0

--image names the images: given several times, each is one; given once with
{i} in it, {i} is replaced by the image's index (0, 1, ...) and {i:03d} by the
same zero-padded, so that a registry holding bench:img000 ... bench:img099
gives 100 distinct images. With --process exec (the default) each task runs
sleep in its sandbox, so the image needs a sleep; with --process none the
sandbox is only held, for images with no shell.

A strategy in --strategies ending in +recycle (pipelined+recycle) resets and
reuses each sandbox for the next task of its image instead of claiming a fresh
one, so a list such as pipelined,pipelined+recycle compares the two; recycling
needs images with a git work tree at the configuration's recycle.workdir
(/testbed by default, as SWE-bench images have).

Every flag of run that shapes the fleet applies to each run (-f,
--warm-per-task, --colocate, --max-warmpool-size, --window-size, the recycling
options, ...); --recycle makes every run recycle. The nodes keep the images
they pulled, so the first run may be the only one to pull them: put a strategy
first twice to see both.`,
		Example: `  # three strategies at two concurrencies, 8 images of 4 tasks, 10 s each
  kubectl sandbox-fleet loadtest --image registry.example.com/bench:img{i:03d} --images 8 \
    --tasks-per-image 4 --task-time 10s --strategies naive,sliding,pipelined --concurrency 8,16

  # two images of your own, 8 tasks each
  kubectl sandbox-fleet loadtest --image python:3.12-slim --image node:22-slim --tasks-per-image 8

  # recycling against fresh sandboxes, on SWE-bench images
  kubectl sandbox-fleet loadtest --image registry.example.com/sweb.eval.{i} --images 4 \
    --tasks-per-image 8 --strategies pipelined,pipelined+recycle --concurrency 8

  # RL-shaped: many tasks of few images, a sandbox warm per task, placed together
  kubectl sandbox-fleet loadtest --image registry.example.com/bench:img{i} --images 2 \
    --tasks-per-image 16 --warm-per-task --colocate --max-warmpool-size 16 --concurrency 16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete(cmd); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	// The strategy and concurrency are what is compared; a load test is
	// one pass and leaves nothing warm.
	o.inputs.AddConfigFlags(f, "strategy", "concurrency", "max-concurrent", "epochs", "keep-warm")
	f.StringArrayVar(&o.batch.Images, "image", nil, "image of the batch, repeatable; in a single one {i} is replaced by each image's index, {i:03d} zero-padded")
	f.IntVar(&o.batch.Count, "images", 0, "distinct images an --image with {i} makes (default 1)")
	f.IntVar(&o.batch.TasksPerImage, "tasks-per-image", 4, "tasks of each image")
	f.DurationVar(&o.taskTime, "task-time", 5*time.Second, "how long each task holds its sandbox")
	f.StringSliceVar(&o.strategies, "strategies", []string{"naive", "sliding", "pipelined"}, "strategies to compare, in order, each with +recycle to reset and reuse sandboxes between an image's tasks (e.g. pipelined,pipelined+recycle), or all ("+strings.Join(config.Strategies, ", ")+")")
	f.IntSliceVar(&o.concurrencies, "concurrency", nil, "concurrencies to compare, each sizing the pools as --max-concurrent does (default: the configuration's)")
	f.StringVar(&o.process, "process", "exec", "exec: run sleep in each sandbox; none: hold each sandbox from here")
	f.StringVar(&o.runID, "run-id", "", "prefix of the runs' ids, which end in the run's number, strategy and concurrency (default: generated)")
	f.StringVarP(&o.output, "output", "o", "table", "comparison on stdout: table, json or yaml")
	return cmd
}

// complete checks everything before anything is created.
func (o *options) complete(cmd *cobra.Command) error {
	if err := output.Validate(o.output, "table", output.JSON, output.YAML); err != nil {
		return err
	}
	if len(o.batch.Images) == 0 {
		return usage.Errorf("no image: give --image, e.g. --image registry.example.com/bench:img{i:03d} --images 8")
	}
	if o.taskTime < 0 {
		return usage.Errorf("--task-time %s: must not be negative", o.taskTime)
	}
	if o.process != "exec" && o.process != "none" {
		return usage.Errorf("--process %q: use exec or none", o.process)
	}
	var err error
	if o.cfg, _, err = o.inputs.Load(cmd.Flags(), o.streams.In); err != nil {
		return err
	}
	modes, err := loadtest.ParseModes(o.strategies, o.cfg.Recycle.Enabled)
	if err != nil {
		return usage.Errorf("--strategies: %w", err)
	}
	if len(o.concurrencies) == 0 {
		o.concurrencies = []int{o.cfg.Budget()}
	}
	for _, c := range o.concurrencies {
		if c < 1 {
			return usage.Errorf("--concurrency %d: must be at least 1", c)
		}
	}
	if o.tasks, err = o.batch.Tasks(o.cfg.Rewrite); err != nil {
		return usage.Errorf("%w", err)
	}
	if o.runID == "" {
		o.runID = runid.New("loadtest")
	}
	o.cells = loadtest.Cells(modes, o.concurrencies)
	for i, c := range o.cells {
		if id := loadtest.RunID(o.runID, i, c); len(validation.IsDNS1123Label(id)) > 0 {
			return usage.Errorf("--run-id %q: the id of its run %d, %s, is not a DNS label: %s", o.runID, i+1, id, strings.Join(validation.IsDNS1123Label(id), "; "))
		}
	}
	return nil
}

func (o *options) run(parent context.Context) error {
	targets, err := fleet.Targets(o.cfg, o.configFlags)
	if err != nil {
		return err
	}
	ctx, cancel := interrupt.Context(parent)
	defer cancel(nil)
	var mu sync.Mutex
	current := ""
	stopSignals := interrupt.Handle(o.streams.ErrOut, cancel, "stopping the load test and tearing down its run", func() string {
		mu.Lock()
		defer mu.Unlock()
		return runid.ReapHint(current, o.inputs.ConfigFile, targets)
	})
	defer stopSignals()

	work := loadtest.Hold(o.taskTime)
	if o.process == "exec" {
		work = loadtest.SleepIn(o.taskTime)
	}
	fmt.Fprintf(o.streams.ErrOut, "loadtest %s: %s of %s each, %s each; %s\n", o.runID,
		output.Count(len(o.tasks)/o.batch.TasksPerImage, "image"), output.Count(o.batch.TasksPerImage, "task"), o.taskTime, output.Count(len(o.cells), "run"))
	rows, err := loadtest.Run(ctx, targets, loadtest.Options{
		Config: o.cfg, Tasks: o.tasks, Cells: o.cells, Work: work, RunID: o.runID,
		Started: func(c loadtest.Cell, id string) {
			mu.Lock()
			current = id
			mu.Unlock()
			fmt.Fprintf(o.streams.ErrOut, "  %s: run %s\n", c.Name(), id)
		},
		Finished: func(r loadtest.Row) {
			fmt.Fprintf(o.streams.ErrOut, "  %s: wall %.1fs, %d/%d ok\n", r.Cell.Name(), r.WallSeconds, r.OK, r.Tasks)
		},
	})
	if len(rows) > 0 {
		var werr error
		if o.output == "table" {
			werr = loadtest.WriteTable(o.streams.Out, rows)
		} else {
			werr = output.Machine(o.streams.Out, o.output, rows)
		}
		if werr != nil {
			return werr
		}
	}
	if err != nil {
		return fmt.Errorf("loadtest %s: %w", o.runID, err)
	}
	failed := 0
	for _, r := range rows {
		if r.Error != "" || r.OK < r.Tasks {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("loadtest %s: %d of %s had tasks fail or stopped short (see the table)", o.runID, failed, output.Count(len(rows), "run"))
	}
	return nil
}
