// Package run implements `kubectl sandbox-fleet run`.
package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/interrupt"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/progress"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/runid"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/results"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// Processes are the ways a task's work is done.
var processes = []string{"exec", "local", "none"}

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams

	inputs inputs.Flags
	runID  string

	// What to do and where to put the outcome.
	process, script                              string
	timeout, heartbeat                           time.Duration
	resultsFile, reportFile, output, metricsAddr string
	progressInterval                             time.Duration
	quiet, prepull                               bool
	prepullHighWater                             int32

	// Filled in by complete.
	command []string
	workFn  fleet.Work
	cfg     config.Fleet
	loaded  []tasks.Task
	done    map[results.Key]bool
}

// NewCommand returns the run verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "run --tasks FILE [flags] [-- COMMAND [ARG...]]",
		Short: "Run a command in a sandbox of each task's image, over a fleet of warm pools",
		Long: `Run loads tasks (JSONL rows with an id and an image, SWE-bench or R2E-Gym rows,
or a plain list of images), sizes a warm pool per image, warms the pools as the
strategy says, claims a sandbox per task, runs the command in it, and tears
everything of the run down at the end.

Placeholders in the command are filled in per task: {id}, {image},
{original_image}, {cluster}, {namespace}, {hostname}, {pod}, {pod_ip},
{sandbox}, {claim}, {node} and {metadata.KEY} for a field of the task's row.

--process exec (the default) runs the command in the sandbox; with --script FILE
the file is copied in and run with the command as its arguments.
--process local runs the command here, once per task, with the sandbox in its
environment (SANDBOX_FLEET_POD, SANDBOX_FLEET_NAMESPACE, ... and
SANDBOX_FLEET_HANDLE as JSON), for agents that drive the sandbox themselves.
--process none claims and releases each sandbox and runs nothing.

With --results FILE each finished task is appended as a JSON line, and a rerun
with the same file skips the tasks whose work already ran.

Interrupting the run (Ctrl-C, SIGTERM) tears it down; a second signal exits at
once and prints how to reap what is left. The exit code is 0 when every task's
work ran (whatever its own exit code), 1 when some task could not run or the
run failed, 2 for bad flags or input.`,
		Example: `  # an eval sweep: run the tests of each SWE-bench instance, pipelined
  kubectl sandbox-fleet run -f fleet.yaml --tasks swebench.jsonl --strategy pipelined \
    --concurrency 32 --results results.jsonl -- sh -c 'cd /testbed && pytest -x -q'

  # a script copied into each sandbox, with the task id as its argument
  kubectl sandbox-fleet run --tasks tasks.jsonl --script eval.sh -- {id}

  # an agent that drives each sandbox itself
  kubectl sandbox-fleet run --tasks tasks.jsonl --process local -- ./agent.py

  # exercise the fleet alone: claim and release a sandbox per task
  kubectl sandbox-fleet run --tasks images.txt --process none --max-concurrent 50`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete(cmd, args); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	o.inputs.AddFlags(f)
	f.StringVar(&o.runID, "run-id", "", "id labelling everything the run creates (default: generated); reuse it to resume a kept-warm run")
	f.StringVar(&o.process, "process", "exec", "what to do in each sandbox: "+strings.Join(processes, ", "))
	f.StringVar(&o.script, "script", "", "script to copy into each sandbox and run, with the command as its arguments")
	f.DurationVar(&o.timeout, "timeout", 0, "bound on each task's work; 0 = none")
	f.StringVar(&o.resultsFile, "results", "", "append one JSON line per task here; rerunning with the same file skips finished tasks")
	f.StringVar(&o.reportFile, "report", "", "write the run report here as JSON")
	f.StringVarP(&o.output, "output", "o", "table", "run report on stdout: table, json or yaml")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at this address, e.g. 127.0.0.1:9095")
	f.DurationVar(&o.progressInterval, "progress-interval", 10*time.Second, "how often progress is logged when stderr is not a terminal")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print no progress and no report table")
	inputs.AddHeartbeat(f, &o.heartbeat, "run")
	f.BoolVar(&o.prepull, "prepull", false, "before warming, have the nodes with asrl-prepull-agent pull the run's images (a PrepullJob per cluster, deleted at the end)")
	inputs.AddPrepullHighWater(f, &o.prepullHighWater)
	return cmd
}

// complete reads and checks everything the run needs, so that bad input is
// reported — with exit code 2 — before anything is created.
func (o *options) complete(cmd *cobra.Command, args []string) error {
	if err := output.Validate(o.output, "table", output.JSON, output.YAML); err != nil {
		return err
	}
	if at := cmd.ArgsLenAtDash(); at > 0 {
		return usage.Errorf("unexpected arguments %q before --: the command goes after --", args[:at])
	}
	o.command = args
	if o.timeout < 0 {
		return usage.Errorf("--timeout %s: must not be negative", o.timeout)
	}
	if err := inputs.CheckHeartbeat(o.heartbeat); err != nil {
		return err
	}
	if err := inputs.CheckPrepullHighWater(o.prepullHighWater); err != nil {
		return err
	}
	var err error
	if o.cfg, o.loaded, err = o.inputs.Load(cmd.Flags(), o.streams.In); err != nil {
		return err
	}

	if err := o.work(); err != nil {
		return err
	}
	if o.runID, err = runid.FromFlag(o.runID); err != nil {
		return err
	}
	o.done = map[results.Key]bool{}
	if o.resultsFile != "" {
		if o.done, err = results.Done(o.resultsFile); err != nil {
			return usage.Errorf("%w", err)
		}
	}
	return nil
}

// work chooses the work of each task and checks its command against every
// task's placeholders.
func (o *options) work() error {
	if !slices.Contains(processes, o.process) {
		return usage.Errorf("--process %q: use one of %s", o.process, strings.Join(processes, ", "))
	}
	switch {
	case o.process == "none" && (len(o.command) > 0 || o.script != ""):
		return usage.Errorf("--process none runs nothing: drop the command and --script")
	case o.process == "local" && o.script != "":
		return usage.Errorf("--script is copied into the sandbox; with --process local give the command after --")
	case o.process == "local" && len(o.command) == 0:
		return usage.Errorf("--process local needs a command after --, e.g. -- ./agent.py {id}")
	case o.process == "exec" && len(o.command) == 0 && o.script == "":
		return usage.Errorf("nothing to run: give a command after --, or --script FILE (or --process none to only claim sandboxes)")
	}
	for _, t := range o.loaded {
		if _, err := fleet.Expand(o.command, t, nil); err != nil {
			return usage.Errorf("%w", err)
		}
	}
	var script []byte
	if o.script != "" {
		var err error
		if script, err = os.ReadFile(o.script); err != nil {
			return usage.Errorf("--script: %w", err)
		}
	}
	switch o.process {
	case "none":
		o.workFn = fleet.NoWork
	case "local":
		o.workFn = fleet.LocalWork(o.command)
	default:
		o.workFn = fleet.ExecWork(o.command, script)
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
	stopSignals := interrupt.Handle(o.streams.ErrOut, cancel, fmt.Sprintf("stopping run %s and tearing it down", o.runID),
		func() string { return runid.ReapHint(o.runID, o.inputs.ConfigFile, targets) })
	defer stopSignals()

	m := metrics.New(o.cfg.Strategy)
	opts := []fleet.Option{fleet.WithHeartbeat("run", o.heartbeat), fleet.WithMetrics(m)}
	if o.prepull {
		opts = append(opts, fleet.WithPrepull(o.prepullHighWater))
	}
	f, err := fleet.Open(ctx, o.runID, o.cfg, o.loaded, targets, opts...)
	if err != nil {
		return err
	}
	defer f.Close()
	if o.metricsAddr != "" {
		addr, err := m.Serve(ctx, o.metricsAddr)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.streams.ErrOut, "metrics at http://%s/metrics\n", addr)
	}

	var writer *results.Writer
	if o.resultsFile != "" {
		if writer, err = results.Create(o.resultsFile); err != nil {
			return err
		}
		defer writer.Close()
	}
	fmt.Fprintf(o.streams.ErrOut, "run %s: %s over %s, strategy %s, %s\n", o.runID, o.taskCount(),
		output.Count(len(f.Plan().Pools), "image"), o.cfg.Strategy, output.Count(len(f.Clusters()), "cluster"))
	if o.prepull {
		fmt.Fprintf(o.streams.ErrOut, "run %s: pre-pulling %s first\n", o.runID, output.Count(len(f.Plan().Pools), "image"))
	}
	var printer *progress.Printer
	if !o.quiet {
		printer = progress.Start(o.streams.ErrOut, printers.IsTerminal(o.streams.ErrOut), o.progressInterval, f.Progress)
	}
	rep, runErr := f.Run(ctx, fleet.RunOptions{
		Work:        o.workFn,
		TaskTimeout: o.timeout,
		Skip:        func(epoch int, id string) bool { return o.done[results.Key{Epoch: epoch, ID: id}] },
		OnResult: func(r fleet.Result) {
			if writer != nil {
				if err := writer.Write(r); err != nil {
					cancel(fmt.Errorf("writing the results file: %w", err))
				}
			}
		},
	})
	if printer != nil {
		printer.Stop()
	}
	return o.outcome(rep, runErr, targets)
}

// outcome reports a run that ended — its report, unless it created
// nothing — and says how it went: its error, with how to reap what its
// teardown left, or how many tasks could not run.
func (o *options) outcome(rep report.Report, runErr error, targets []fleet.Target) error {
	if errors.Is(runErr, fleet.ErrNothingCreated) {
		return runErr
	}
	if err := o.writeReport(rep); err != nil {
		return errors.Join(runErr, err)
	}
	if te := (*fleet.TeardownError)(nil); errors.As(runErr, &te) {
		return fmt.Errorf("run %s: %w\n%s", o.runID, runErr, runid.ReapHint(o.runID, o.inputs.ConfigFile, targets))
	}
	if runErr != nil {
		return fmt.Errorf("run %s: %w", o.runID, runErr)
	}
	if notRun := rep.TasksNotRun; notRun > 0 {
		hint := ""
		if o.resultsFile != "" {
			hint = "; rerun with the same --results to retry them"
		}
		return fmt.Errorf("run %s: %d of %d tasks could not run (see the error of each in the results)%s", o.runID, notRun, rep.TasksOK+rep.TasksErr, hint)
	}
	return nil
}

// taskCount says how many tasks the run does: those left, of how many,
// when it resumes from a results file.
func (o *options) taskCount() string {
	all := len(o.loaded) * o.cfg.Epochs
	left := all
	for e := 1; e <= o.cfg.Epochs; e++ {
		for _, t := range o.loaded {
			if o.done[results.Key{Epoch: e, ID: t.ID}] {
				left--
			}
		}
	}
	what := "task"
	if o.cfg.Epochs > 1 {
		what = "task run"
	}
	if left == all {
		return output.Count(all, what)
	}
	return fmt.Sprintf("resuming, %d of %s left", left, output.Count(all, what))
}

// writeReport prints the run report and writes it to --report.
func (o *options) writeReport(rep report.Report) error {
	if o.reportFile != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.reportFile, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing the run report: %w", err)
		}
	}
	switch {
	case o.output != "table":
		return output.Machine(o.streams.Out, o.output, rep)
	case o.quiet:
		return nil
	default:
		return rep.WriteTable(o.streams.Out)
	}
}
