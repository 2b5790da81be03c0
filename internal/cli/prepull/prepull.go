// Package prepull implements `kubectl sandbox-fleet prepull`: a PrepullJob
// for a task file's images, carried out by the nodes' asrl-prepull-agents,
// and optionally waited for.
package prepull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/runid"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/prepull"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	fleetlabels "github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	taskFiles   []string
	tasks       inputs.TaskFlags
	selector    string
	name        string
	spec        v1alpha1.PrepullJobSpec
	ttl         time.Duration
	runID       string
	delete      bool
	wait        bool
	timeout     time.Duration
	output      string
}

// NewCommand returns the prepull verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "prepull (--tasks FILE [-l SELECTOR] [--run-id ID] [--wait] | --delete --run-id ID)",
		Short: "Pull a task file's images onto the nodes before a run needs them",
		Long: `Prepull creates a PrepullJob for the images of the task files. On every node
the selector picks, asrl-prepull-agent pulls them through the node's runtime
(with its own registry credentials and mirrors), a few at a time, skipping
what the node has, and starts no pull once the image filesystem is at the
--prepull-high-water mark. --delete-when-done has the nodes remove the images they
pulled when the job is deleted; --ttl has the nodes delete the job that long
after all of them finished it.

--wait follows the job until every picked node with an agent is done, showing
progress, then prints each node's result; it fails if a node could not pull
every image. Interrupting the wait leaves the job running.

--run-id makes the job a run's: labelled as the run's objects are, so the
run's teardown and reap (and the cluster's reaper, once the run's heartbeat
expires) delete it with the rest. --delete --run-id deletes the run's
PrepullJobs, and nothing else.`,
		Example: `  # warm the GPU pool's nodes for a sweep and wait
  kubectl sandbox-fleet prepull --tasks swe-bench-lite.jsonl -l pool=eval --wait -n rl

  # as JSON, stopping at 70% disk, removing the images when the job is deleted
  kubectl sandbox-fleet prepull --tasks images.txt --prepull-high-water 70 --delete-when-done --wait -o json

  # keep the images a day after the nodes are done, then free the disk
  kubectl sandbox-fleet prepull --tasks images.txt --delete-when-done --ttl 24h

  # a session's pre-pull, gone with the session; or deleted before that
  kubectl sandbox-fleet prepull --tasks images.txt --run-id rl-step-cache -n rl
  kubectl sandbox-fleet prepull --delete --run-id rl-step-cache -n rl`,
		Args: usage.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			if o.delete {
				return o.deleteOfRun(cmd.Context())
			}
			loaded, err := o.tasks.Load(o.taskFiles, o.streams.In, nil)
			if err != nil {
				return err
			}
			refs := make([]string, len(loaded))
			for i, t := range loaded {
				refs[i] = t.Image
			}
			if o.spec.Images, err = images.NormalizeAll(refs); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.taskFiles, "tasks", nil, "task file: JSONL rows or a list of images; - reads stdin; repeatable")
	o.tasks.AddFlags(f)
	f.StringVarP(&o.selector, "selector", "l", "", "nodes to pull onto, by label (key=value,...); default every node with an agent")
	f.StringVar(&o.name, "name", "", "the job's name (default: generated, prepull-XXXXX)")
	f.Int32Var(&o.spec.PerNodeParallelism, "parallelism", 2, "images a node pulls at once (1-16)")
	inputs.AddPrepullHighWater(f, &o.spec.DiskHighWaterPercent, "high-water")
	f.BoolVar(&o.spec.DeleteWhenDone, "delete-when-done", false, "nodes remove the images they pulled when the job is deleted")
	f.DurationVar(&o.ttl, "ttl", 0, "delete the job this long after every node finished it (whole seconds; default: keep it)")
	f.BoolVar(&o.wait, "wait", false, "wait until every node is done, showing progress")
	f.DurationVar(&o.timeout, "timeout", 30*time.Minute, "with --wait, how long to wait")
	f.StringVarP(&o.output, "output", "o", "", "with --wait, the result as json or yaml (default: a table)")
	f.StringVar(&o.runID, "run-id", "", "make the job this run's: its teardown and reap delete it")
	_ = cmd.RegisterFlagCompletionFunc("run-id", runid.Complete(configFlags))
	f.BoolVar(&o.delete, "delete", false, "delete the PrepullJobs of --run-id instead, creating nothing")
	return cmd
}

func (o *options) validate() error {
	if o.runID != "" {
		if err := runid.Check(o.runID); err != nil {
			return err
		}
	}
	if o.delete {
		if o.runID == "" || len(o.taskFiles) > 0 || o.wait {
			return usage.Errorf("--delete deletes the PrepullJobs of a run: give --run-id ID, and no --tasks or --wait")
		}
		return nil
	}
	if len(o.taskFiles) == 0 {
		return usage.Errorf("no images: give a task file with --tasks FILE (JSONL rows or a list of images; - for stdin)")
	}
	if o.spec.PerNodeParallelism < 1 || o.spec.PerNodeParallelism > 16 {
		return usage.Errorf("--parallelism %d: must be 1 to 16", o.spec.PerNodeParallelism)
	}
	if err := inputs.CheckPrepullHighWater(o.spec.DiskHighWaterPercent); err != nil {
		return err
	}
	if o.timeout <= 0 {
		return usage.Errorf("--timeout %s: must be positive", o.timeout)
	}
	if o.ttl < 0 || o.ttl > math.MaxInt32*time.Second || o.ttl%time.Second != 0 {
		return usage.Errorf("--ttl %s: must be whole seconds, 0s to %s", o.ttl, math.MaxInt32*time.Second)
	}
	if o.ttl > 0 {
		o.spec.TTLSecondsAfterFinished = ptr.To(int32(o.ttl / time.Second))
	}
	if o.selector != "" {
		set, err := labels.ConvertSelectorToLabelsMap(o.selector)
		if err != nil {
			return usage.Errorf("--selector %q: %v (PrepullJobs select nodes by key=value pairs)", o.selector, err)
		}
		o.spec.NodeSelector = set
	}
	return output.Validate(o.output, output.Human, output.JSON, output.YAML)
}

func (o *options) run(ctx context.Context) error {
	clients, err := kube.FromFlags(o.configFlags, kube.Limits{})
	if err != nil {
		return err
	}
	// The nodes to wait for are found first, so a wait that cannot be
	// done creates nothing.
	var targets []string
	if o.wait {
		var without []string
		if targets, without, err = prepull.Targets(ctx, clients.Client, o.spec.NodeSelector); err != nil {
			return err
		}
		if len(without) > 0 {
			fmt.Fprintf(o.streams.ErrOut, "Warning: %s the selector picks run no asrl-prepull-agent and will not pull: %s\n",
				output.Count(len(without), "node"), strings.Join(without, ", "))
		}
		if len(targets) == 0 {
			return errors.New("no node the selector picks runs asrl-prepull-agent (none publishes a NodeImageCache): nothing would pull")
		}
	}
	job := &v1alpha1.PrepullJob{ObjectMeta: metav1.ObjectMeta{Namespace: clients.Namespace, Name: o.name}, Spec: o.spec}
	if o.name == "" {
		job.GenerateName = "prepull-"
	}
	if o.runID != "" {
		job.Labels = fleetlabels.ForRun(o.runID)
		if o.name == "" {
			job.GenerateName = o.runID + "-prepull-"
		}
	}
	if err := clients.Client.Create(ctx, job); err != nil {
		return fmt.Errorf("creating the PrepullJob: %w", err)
	}
	fmt.Fprintf(o.streams.ErrOut, "prepulljob.sandbox-fleet.io/%s created: %s\n", job.Name, output.Count(len(o.spec.Images), "image"))
	if !o.wait {
		fmt.Fprintf(o.streams.Out, "%s\n", job.Name)
		return nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	p, err := prepull.Wait(waitCtx, clients.Client, job, targets, time.Second, func(p nodecache.JobProgress) {
		fmt.Fprintf(o.streams.ErrOut, "%s: %d/%d nodes done: %d pulled, %d present, %d failed, %d pending\n",
			job.Name, p.Done, len(p.Nodes), p.Pulled, p.Present, p.Failed, p.Pending)
	})
	if o.output != output.Human {
		if perr := output.Machine(o.streams.Out, o.output, p); perr != nil {
			return perr
		}
	} else if perr := printNodes(o.streams.Out, p); perr != nil {
		return perr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("PrepullJob %s: %d of %d nodes not done after %s; the job goes on", job.Name, len(p.Nodes)-p.Done, len(p.Nodes), o.timeout)
	}
	if err != nil {
		return err
	}
	if failed := len(p.Nodes) - p.Succeeded; failed > 0 {
		return fmt.Errorf("PrepullJob %s: %s did not get every image", job.Name, output.Count(failed, "node"))
	}
	return nil
}

// deleteOfRun deletes the PrepullJobs of --run-id and names them.
func (o *options) deleteOfRun(ctx context.Context) error {
	clients, err := kube.FromFlags(o.configFlags, kube.Limits{})
	if err != nil {
		return err
	}
	names, err := prepull.DeleteOfRun(ctx, clients.Client, clients.Namespace, o.runID)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		fmt.Fprintf(o.streams.ErrOut, "run %s has no PrepullJobs in %s\n", o.runID, clients.Namespace)
	}
	for _, name := range names {
		fmt.Fprintf(o.streams.Out, "prepulljob.sandbox-fleet.io/%s deleted\n", name)
	}
	return nil
}

func printNodes(w io.Writer, p nodecache.JobProgress) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPHASE\tPULLED\tPRESENT\tFAILED\tPENDING\tMESSAGE")
	for _, n := range p.Nodes {
		msg := n.Message
		for _, f := range n.Failures {
			msg += fmt.Sprintf("; %s: %s", f.Image, f.Message)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", n.Node, n.Phase, n.Pulled, n.Present, n.Failed, n.Pending, output.OrNone(strings.TrimPrefix(msg, "; ")))
	}
	return tw.Flush()
}
