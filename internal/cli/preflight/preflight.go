// Package preflight implements `kubectl sandbox-fleet preflight`.
package preflight

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

type options struct {
	configFlags     *genericclioptions.ConfigFlags
	streams         genericiooptions.IOStreams
	runtimeClass    string
	imagePullSecret string
	output          string
}

// NewCommand returns the preflight verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check that a cluster and namespace can run a sandbox fleet",
		Long: `Check, without creating anything, that the cluster answers, serves the Agent
Sandbox v1beta1 API (Sandbox, SandboxTemplate, SandboxWarmPool, SandboxClaim),
that the namespace exists, that you may create, watch and delete templates,
warm pools and claims there, and that the runtime class and image pull secret
you name exist.

Failed checks make the command exit 1; warnings do not.`,
		Example: `  # check the current context's namespace
  kubectl sandbox-fleet preflight

  # check a namespace, a gVisor runtime class and a pull secret, as JSON
  kubectl sandbox-fleet preflight -n rl --runtime-class gvisor --image-pull-secret regcred -o json`,
		Args: usage.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	cmd.Flags().StringVar(&o.runtimeClass, "runtime-class", "", "runtime class the sandboxes will use; it must exist")
	cmd.Flags().StringVar(&o.imagePullSecret, "image-pull-secret", "", "image pull secret the sandboxes will use; it must exist in the namespace")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func (o *options) run(cmd *cobra.Command) error {
	if err := output.Validate(o.output, "table", output.JSON, output.YAML); err != nil {
		return err
	}
	clients, err := kube.FromFlags(o.configFlags, kube.Limits{})
	if err != nil {
		return err
	}
	report := preflight.Run(cmd.Context(), clients.Kube, clients.Config.Host, preflight.Options{
		Namespace:       clients.Namespace,
		RuntimeClass:    o.runtimeClass,
		ImagePullSecret: o.imagePullSecret,
	})
	if o.output == "table" {
		err = printTable(o.streams.Out, &report, output.Colors(o.streams.Out))
	} else {
		err = output.Machine(o.streams.Out, o.output, report)
	}
	if err != nil {
		return err
	}
	if failures := report.Failures(); len(failures) > 0 {
		first := failures[0]
		return fmt.Errorf("preflight failed (%d of %d checks): %s: %s; to fix: %s",
			len(failures), len(report.Checks), first.Name, first.Detail, first.Fix)
	}
	return nil
}

// printTable writes the checks, then how to fix those that did not pass.
// Statuses are coloured on a terminal; every status of the column gets
// escape sequences of the same length, so the columns stay aligned.
func printTable(w io.Writer, r *preflight.Report, colors output.Palette) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, c := range r.Checks {
		status := colors.Good(string(c.Status))
		switch c.Status {
		case preflight.Warn:
			status = colors.Warn(string(c.Status))
		case preflight.Fail:
			status = colors.Bad(string(c.Status))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, status, c.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Checks {
		if c.Fix != "" {
			fmt.Fprintf(w, "%s: %s\n", c.Name, c.Fix)
		}
	}
	return nil
}
