// Package teardown implements `kubectl sandbox-fleet teardown`.
package teardown

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/runid"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/teardown"
)

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	configFile  string
	runID       string
	verify      bool
	dryRun      bool
}

// NewCommand returns the teardown verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "teardown --run-id ID [--verify | --dry-run]",
		Short: "Tear down a run: its claims, then its warm pools, then its templates",
		Long: `Teardown removes a run that was kept warm (run --keep-warm) or left behind, on
every cluster of the fleet configuration (-f) or the current context: claims
first, so no sandbox is handed out while its pool goes, then warm pools, then
templates, and waits until their sandboxes and Pods are gone.

--verify then lists, from the API servers, anything of the run still there
(its PrepullJobs too) and exits 1 if there is. --dry-run only lists it,
deleting nothing.`,
		Example: `  kubectl sandbox-fleet teardown --run-id rl-step-cache -f fleet.yaml --verify

  # is anything of the run left?
  kubectl sandbox-fleet teardown --run-id rl-step-cache -n rl --dry-run`,
		Args: usage.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.runID == "" {
				return usage.Errorf("--run-id is required: the run to tear down")
			}
			targets, err := inputs.Targets(o.configFile, o.configFlags)
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), targets)
		},
	}
	cmd.Flags().StringVarP(&o.configFile, "config", "f", "", "fleet configuration whose clusters the run spans (default: the current context)")
	cmd.Flags().StringVar(&o.runID, "run-id", "", "the run to tear down")
	_ = cmd.RegisterFlagCompletionFunc("run-id", runid.Complete(configFlags))
	cmd.Flags().BoolVar(&o.verify, "verify", false, "list anything of the run left afterwards, and fail if there is")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "delete nothing: list anything of the run there, and fail if there is")
	return cmd
}

func (o *options) run(ctx context.Context, targets []fleet.Target) error {
	if o.dryRun {
		return o.leftovers(ctx, targets)
	}
	var errs []error
	for _, t := range targets {
		if err := teardown.Reap(ctx, t.Clients, o.runID); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", t.Config.Name, err))
			continue
		}
		fmt.Fprintf(o.streams.Out, "run %s torn down on cluster %s (namespace %s)\n", o.runID, t.Config.Name, t.Clients.Namespace)
	}
	if err := errors.Join(errs...); err != nil || !o.verify {
		return err
	}
	return o.leftovers(ctx, targets)
}

// leftovers lists what of the run is on the targets, failing if anything.
func (o *options) leftovers(ctx context.Context, targets []fleet.Target) error {
	var left []string
	for _, t := range targets {
		objs, err := teardown.Leftovers(ctx, t.Clients.Client, t.Clients.Namespace, o.runID)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", t.Config.Name, err)
		}
		for _, obj := range objs {
			left = append(left, t.Config.Name+": "+obj)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("run %s left %d objects:\n  %s", o.runID, len(left), strings.Join(left, "\n  "))
	}
	fmt.Fprintf(o.streams.Out, "verified: nothing of run %s is left\n", o.runID)
	return nil
}
