// Package get implements `kubectl sandbox-fleet get runs|pools|claims`: the
// objects of runs, found by their run-id label and grouped by run, printed
// like kubectl get prints.
package get

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/runid"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	print       PrintOptions
	runID       string
}

// kind is what a sub-verb lists.
type kind struct {
	use, short, plural string
	aliases            []string
	// list picks from the inventory what is printed: the list object for
	// -o json|yaml|name and the table.
	list func(inv *inventory.Inventory, now time.Time) (runtime.Object, *metav1.Table)
	// pulls: -o wide reads how far the nodes are with pulling the
	// images sandboxes wait for, which the table shows.
	pulls bool
}

var kinds = []kind{
	{use: "runs", short: "List runs: their pools, claims and Pods, ready of all", plural: "runs", aliases: []string{"run"},
		list: func(inv *inventory.Inventory, now time.Time) (runtime.Object, *metav1.Table) {
			runs := inv.Runs()
			return runs, RunsTable(runs, now)
		}},
	{use: "pools", short: "List warm pools: ready sandboxes of the depth asked, image, nodes", plural: "warm pools",
		aliases: []string{"pool", "warmpools", "sandboxwarmpools"},
		list: func(inv *inventory.Inventory, now time.Time) (runtime.Object, *metav1.Table) {
			return &extensionsv1beta1.SandboxWarmPoolList{Items: inv.Pools}, PoolsTable(inv, now)
		}},
	{use: "claims", short: "List claims: the task, how its sandbox stands (with -o wide, its image's pull), its node", plural: "claims",
		aliases: []string{"claim", "sandboxclaims"}, pulls: true,
		list: func(inv *inventory.Inventory, now time.Time) (runtime.Object, *metav1.Table) {
			return &extensionsv1beta1.SandboxClaimList{Items: inv.Claims}, ClaimsTable(inv, now)
		}},
}

// NewCommand returns the get verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "get (runs | pools | claims)",
		Short: "List runs, warm pools or claims, grouped by run",
		Long: `Get lists what runs have in the namespace — found by the sandbox-fleet.io/run-id
label every run puts on its objects — as kubectl get does: a table (wide adds
columns), the objects as JSON or YAML, or their names.`,
		Example: `  # the runs in the current namespace, with ready claims and Pods
  kubectl sandbox-fleet get runs

  # the warm pools of one run, with the nodes their sandboxes are on
  kubectl sandbox-fleet get pools --run-id run-20261129-120000-a1b2c3 -o wide

  # every claim in every namespace, as JSON
  kubectl sandbox-fleet get claims -A -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: usage.Subcommand,
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&o.print.Format, "output", "o", "table", "output format: "+strings.Join(Formats, ", "))
	pf.StringVar(&o.runID, "run-id", "", "only this run's objects")
	pf.BoolVarP(&o.print.AllNamespaces, "all-namespaces", "A", false, "list in every namespace")
	pf.BoolVar(&o.print.NoHeaders, "no-headers", false, "print tables without their header")
	_ = cmd.RegisterFlagCompletionFunc("run-id", runid.Complete(configFlags))
	for _, k := range kinds {
		cmd.AddCommand(&cobra.Command{
			Use:     k.use,
			Aliases: k.aliases,
			Short:   k.short,
			Example: fmt.Sprintf("  kubectl sandbox-fleet get %s\n  kubectl sandbox-fleet get %s -o wide --run-id RUN_ID", k.use, k.use),
			Args:    usage.Args(cobra.NoArgs),
			RunE:    func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), k) },
		})
	}
	return cmd
}

func (o *options) run(ctx context.Context, k kind) error {
	if err := output.Validate(o.print.Format, Formats...); err != nil {
		return err
	}
	clients, err := kube.FromFlags(o.configFlags, kube.Limits{})
	if err != nil {
		return err
	}
	namespace := clients.Namespace
	if o.print.AllNamespaces {
		namespace = ""
	}
	inv, err := inventory.List(ctx, clients.Client, namespace, o.runID)
	if err != nil {
		return fmt.Errorf("listing %s on %s: %w", k.plural, clients.Config.Host, err)
	}
	if k.pulls && o.print.Format == "wide" {
		if err := inv.ReadPulls(ctx, clients.Client); err != nil {
			fmt.Fprintf(o.streams.ErrOut, "Warning: pulls in progress: %v\n", err)
		}
	}
	list, table := k.list(inv, time.Now())
	if err := setKinds(list); err != nil {
		return err
	}
	if len(table.Rows) == 0 && (o.print.Format == "table" || o.print.Format == "wide") {
		where := "in namespace " + namespace
		if namespace == "" {
			where = "in any namespace"
		}
		if o.runID != "" {
			where += " for run " + o.runID
		}
		fmt.Fprintf(o.streams.ErrOut, "No %s found %s.\n", k.plural, where)
		return nil
	}
	return Print(o.streams.Out, list, table, o.print)
}

// setKinds fills in the API version and kind of list and its items, which
// objects read through a typed client lack and kubectl's printers need.
func setKinds(list runtime.Object) error {
	if list.GetObjectKind().GroupVersionKind().Empty() {
		gvk, err := apiutil.GVKForObject(list, kube.Scheme)
		if err != nil {
			return err
		}
		list.GetObjectKind().SetGroupVersionKind(gvk)
	}
	return apimeta.EachListItem(list, func(item runtime.Object) error {
		if !item.GetObjectKind().GroupVersionKind().Empty() {
			return nil
		}
		gvk, err := apiutil.GVKForObject(item, kube.Scheme)
		if err != nil {
			return err
		}
		item.GetObjectKind().SetGroupVersionKind(gvk)
		return nil
	})
}
