// Package reap implements `kubectl sandbox-fleet reap`: the recovery path
// for runs whose driver died without tearing down (SIGKILL, OOM, a lost
// machine), found by the run-id label on everything a run creates.
package reap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/runid"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/teardown"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	configFile  string
	runIDs      []string
	orphans     bool
	alive       []string
	minAge      time.Duration
	dryRun      bool
	allNS       bool
}

// NewCommand returns the reap verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "reap (--run-id ID... | --orphans [--alive-run-ids ID,...] [--min-age 5m]) [--dry-run]",
		Short: "Delete what runs left behind, by run id or as orphans",
		Long: `Reap deletes the claims, warm pools and templates of runs — and with them their
sandboxes and Pods — selected by the sandbox-fleet.io/run-id label. Nothing
without the label is touched.

--run-id names runs to reap. --orphans reaps every run in the namespace whose
driver (run or serve) stopped renewing its heartbeat Lease, and is not named
by --alive-run-ids; a run whose driver is alive is never taken, however old.
Runs with no heartbeat at all (left by versions before heartbeats) are taken
once their oldest object is older than --min-age. --dry-run lists what
would be reaped. -A sweeps every namespace. With -f, every cluster of the
fleet configuration is swept.`,
		Example: `  # a run killed with SIGKILL
  kubectl sandbox-fleet reap --run-id run-20261129-120000-a1b2c3 -n rl

  # everything but the runs still going, older than ten minutes, listed first
  kubectl sandbox-fleet reap --orphans --alive-run-ids run-a,run-b --min-age 10m --dry-run

  # every orphaned run in every namespace
  kubectl sandbox-fleet reap --orphans -A`,
		Args: usage.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(o.runIDs) == 0 && !o.orphans {
				return usage.Errorf("say what to reap: --run-id ID, or --orphans")
			}
			if len(o.runIDs) > 0 && o.orphans {
				return usage.Errorf("--run-id and --orphans exclude each other")
			}
			if o.minAge < 0 {
				return usage.Errorf("--min-age %s: must not be negative", o.minAge)
			}
			targets, err := inputs.Targets(o.configFile, o.configFlags)
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), targets)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.configFile, "config", "f", "", "fleet configuration whose clusters to sweep (default: the current context)")
	f.StringSliceVar(&o.runIDs, "run-id", nil, "run to reap; repeatable or comma-separated")
	_ = cmd.RegisterFlagCompletionFunc("run-id", runid.Complete(configFlags))
	f.BoolVar(&o.orphans, "orphans", false, "reap every run not named by --alive-run-ids")
	f.StringSliceVar(&o.alive, "alive-run-ids", nil, "runs still going, which --orphans keeps")
	f.DurationVar(&o.minAge, "min-age", 5*time.Minute, "with --orphans, keep runs with no heartbeat Lease younger than this")
	f.BoolVar(&o.dryRun, "dry-run", false, "list what would be reaped, delete nothing")
	f.BoolVarP(&o.allNS, "all-namespaces", "A", false, "reap in every namespace, not only the current one")
	return cmd
}

func (o *options) run(ctx context.Context, targets []fleet.Target) error {
	var rows []row
	var errs []error
	now := time.Now()
	for _, t := range targets {
		namespace := t.Clients.Namespace
		if o.allNS {
			namespace = ""
		}
		inv, err := inventory.List(ctx, t.Clients.Client, namespace, "")
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", t.Config.Name, err))
			continue
		}
		// Heartbeats, like the objects they vouch for, live in a run's
		// namespace: judge and reap each namespace with its own.
		byNamespace := map[string][]inventory.Run{}
		for _, r := range inv.Runs().Items {
			byNamespace[r.Namespace] = append(byNamespace[r.Namespace], r)
		}
		for _, ns := range slices.Sorted(maps.Keys(byNamespace)) {
			clients := t.Clients.In(ns)
			chosen, err := o.choose(ctx, clients, byNamespace[ns], now)
			if err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: namespace %s: %w", t.Config.Name, ns, err))
				continue
			}
			for _, r := range chosen {
				action := "would reap"
				if !o.dryRun {
					action = "reaped"
					if err := teardown.Reap(ctx, clients, r.Name); err != nil {
						action = "failed"
						errs = append(errs, fmt.Errorf("cluster %s: namespace %s: reaping run %s: %w", t.Config.Name, ns, r.Name, err))
					}
				}
				rows = append(rows, row{cluster: t.Config.Name, run: r, action: action})
			}
		}
	}
	if err := printRows(o.streams.Out, rows, now); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// choose picks the runs of one namespace to reap: orphans, or those named.
func (o *options) choose(ctx context.Context, clients *kube.Clients, runs []inventory.Run, now time.Time) ([]inventory.Run, error) {
	if o.orphans {
		beats, err := teardown.Heartbeats(ctx, clients, now)
		if err != nil {
			return nil, err
		}
		return teardown.Orphans(runs, o.alive, beats, o.minAge, now), nil
	}
	var chosen []inventory.Run
	for _, r := range runs {
		if slices.Contains(o.runIDs, r.Name) {
			chosen = append(chosen, r)
		}
	}
	return chosen, nil
}

// row is a run reap chose, on a cluster, and what became of it.
type row struct {
	cluster string
	run     inventory.Run
	action  string
}

func printRows(w io.Writer, rows []row, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNAMESPACE\tRUN ID\tAGE\tOBJECTS\tACTION")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.cluster, r.run.Namespace, r.run.Name,
			output.Age(r.run.CreationTimestamp, now), objects(r.run.Status), r.action)
	}
	return tw.Flush()
}

// objects renders a run's counts by kind, e.g. "2 claims, 4 pods".
func objects(s inventory.RunStatus) string {
	var parts []string
	for _, c := range []struct {
		n    int
		kind string
	}{{s.Claims, "claim"}, {s.Pools, "pool"}, {s.Templates, "template"}, {s.Pods, "pod"}} {
		if c.n > 0 {
			parts = append(parts, output.Count(c.n, c.kind))
		}
	}
	return strings.Join(parts, ", ")
}
