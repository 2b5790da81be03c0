// Package describe implements `kubectl sandbox-fleet describe run ID`: one
// run in detail — its pools and the nodes they are on, its claims and how
// each stands, the Pods in trouble and the recent events of it all — to
// find out why a run is slow or stuck.
package describe

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/runid"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/controllerwatch"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// maxEvents bounds the events shown: the latest matter.
const maxEvents = 20

// NewCommand returns the describe verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe run RUN_ID",
		Short: "Show one run in detail: pools, claims, Pods in trouble, events",
		Example: `  # why is this run slow?
  kubectl sandbox-fleet describe run run-20261129-120000-a1b2c3 -n rl`,
		Args: cobra.ArbitraryArgs,
		RunE: usage.Subcommand,
	}
	cmd.AddCommand(&cobra.Command{
		Use:               "run RUN_ID",
		Short:             "Show one run in detail: pools, claims, Pods in trouble, events",
		Example:           `  kubectl sandbox-fleet describe run run-20261129-120000-a1b2c3`,
		Args:              usage.Args(cobra.ExactArgs(1)),
		ValidArgsFunction: runid.Complete(configFlags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), configFlags, streams, args[0])
		},
	})
	return cmd
}

func run(ctx context.Context, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, runID string) error {
	clients, err := kube.FromFlags(configFlags, kube.Limits{})
	if err != nil {
		return err
	}
	inv, err := inventory.List(ctx, clients.Client, clients.Namespace, runID)
	if err != nil {
		return fmt.Errorf("reading run %s: %w", runID, err)
	}
	if err := inv.ReadPulls(ctx, clients.Client); err != nil {
		fmt.Fprintf(streams.ErrOut, "Warning: pulls in progress: %v\n", err)
	}
	runs := inv.Runs().Items
	if len(runs) == 0 {
		return fmt.Errorf("run %s has no objects in namespace %s: list the runs there with `kubectl sandbox-fleet get runs`, or name the namespace with -n", runID, clients.Namespace)
	}
	events := &corev1.EventList{}
	if err := clients.Client.List(ctx, events, client.InNamespace(clients.Namespace)); err != nil {
		return fmt.Errorf("reading the events of run %s: %w", runID, err)
	}
	// Not allowed to read the controller's Lease: nothing is said of it.
	return Run(streams.Out, runs[0], inv, events.Items, controllerwatch.Read(ctx, clients.Kube), time.Now())
}

// Run writes run r, whose objects inv holds, with the events about them
// among events and the Agent Sandbox controller's state, as of now.
func Run(w io.Writer, r inventory.Run, inv *inventory.Inventory, events []corev1.Event, controller controllerwatch.State, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	s := r.Status
	fmt.Fprintf(tw, "Name:\t%s\n", r.Name)
	fmt.Fprintf(tw, "Namespace:\t%s\n", r.Namespace)
	fmt.Fprintf(tw, "Created:\t%s (%s ago)\n", r.CreationTimestamp.UTC().Format(time.RFC3339), output.Age(r.CreationTimestamp, now))
	fmt.Fprintf(tw, "Templates:\t%d\n", s.Templates)
	fmt.Fprintf(tw, "Warm pools:\t%d, asked to keep %d sandboxes\n", s.Pools, s.WarmReplicas)
	fmt.Fprintf(tw, "Claims:\t%d, %d Ready\n", s.Claims, s.ReadyClaims)
	fmt.Fprintf(tw, "Pods:\t%d, %d Ready\n", s.Pods, s.ReadyPods)
	fmt.Fprintf(tw, "Nodes:\t%s\n", output.OrNone(inventory.Nodes(pointers(inv.Pods))))
	if controller.Down {
		fmt.Fprintf(tw, "Controller:\tAgent Sandbox controller down for %s: no replica renews its leader Lease %s/%s, so no claim becomes Ready until it is back\n",
			output.Age(metav1.NewTime(controller.Since), now), preflight.ControllerNamespace, preflight.ControllerLease)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var pools, claims, pulling, troubled, happened [][]string
	for i := range inv.Pools {
		p := &inv.Pools[i]
		pools = append(pools, []string{p.Name, fmt.Sprintf("%d/%d", p.Status.ReadyReplicas, inventory.Depth(p)),
			inv.ImageOf(p), output.OrNone(inventory.Nodes(inv.PodsOf(p)))})
	}
	for i := range inv.Claims {
		c := &inv.Claims[i]
		claims = append(claims, []string{c.Name, output.OrNone(inventory.TaskOf(c)), inv.Status(c),
			output.OrNone(inv.NodeOf(c)), output.Age(c.CreationTimestamp, now)})
	}
	for i := range inv.Pods {
		p := &inv.Pods[i]
		if pull, ok := inv.PullOf(p); ok {
			pulling = append(pulling, []string{p.Name, p.Spec.NodeName, output.OrNone(inventory.SandboxImage(p)), pull.String()})
		}
		if reason, message, ok := inventory.Trouble(p); ok {
			troubled = append(troubled, []string{p.Name, reason, output.OrNone(p.Spec.NodeName), oneLine(message)})
		}
	}
	for _, e := range about(events, inv) {
		happened = append(happened, []string{e.Type, e.Reason, output.Age(e.LastTimestamp, now),
			strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name, oneLine(e.Message)})
	}
	for _, sec := range []struct {
		title, header string
		rows          [][]string
	}{
		{"Warm Pools", "NAME\tREADY\tIMAGE\tNODES", pools},
		{"Claims", "NAME\tTASK\tSTATUS\tNODE\tAGE", claims},
		{"Pulling", "POD\tNODE\tIMAGE\tPULL", pulling},
		{"Pods in Trouble", "POD\tREASON\tNODE\tMESSAGE", troubled},
		{"Events", "TYPE\tREASON\tAGE\tOBJECT\tMESSAGE", happened},
	} {
		if err := section(w, sec.title, sec.header, sec.rows); err != nil {
			return err
		}
	}
	return nil
}

// about picks the latest events about the run's objects and sandboxes,
// oldest first, as kubectl describe lists them.
func about(events []corev1.Event, inv *inventory.Inventory) []corev1.Event {
	names := map[string]bool{}
	for i := range inv.Templates {
		names["SandboxTemplate/"+inv.Templates[i].Name] = true
	}
	for i := range inv.Pools {
		names["SandboxWarmPool/"+inv.Pools[i].Name] = true
	}
	for i := range inv.Claims {
		names["SandboxClaim/"+inv.Claims[i].Name] = true
		if sb := inv.Claims[i].Status.SandboxStatus.Name; sb != "" {
			names["Sandbox/"+sb] = true
		}
	}
	for i := range inv.Pods {
		names["Pod/"+inv.Pods[i].Name] = true
	}
	var out []corev1.Event
	for _, e := range events {
		if names[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] {
			if e.LastTimestamp.IsZero() {
				e.LastTimestamp.Time = e.EventTime.Time
			}
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b corev1.Event) int {
		return cmp.Compare(a.LastTimestamp.UnixNano(), b.LastTimestamp.UnixNano())
	})
	if len(out) > maxEvents {
		out = out[len(out)-maxEvents:]
	}
	return out
}

// section writes a titled table of rows under a tab-separated header,
// indented, or <none> when there are no rows, as kubectl describe does.
func section(w io.Writer, title, header string, rows [][]string) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintf(w, "%s:  <none>\n", title)
		return err
	}
	fmt.Fprintf(w, "%s:\n", title)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+header)
	for _, r := range rows {
		fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func pointers(pods []corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	return out
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
