// Package version implements `kubectl sandbox-fleet version`.
package version

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	buildversion "github.com/sandbox-fleet/sandbox-fleet/pkg/version"
)

// Versions is what the verb reports.
type Versions struct {
	Client buildversion.Info `json:"clientVersion"`
	Server string            `json:"serverVersion,omitempty"`
}

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	clientOnly  bool
	output      string
}

// NewCommand returns the version verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the cluster's",
		Example: `  # the plugin and the Kubernetes version of the current context
  kubectl sandbox-fleet version

  # the plugin only, as JSON
  kubectl sandbox-fleet version --client -o json`,
		Args: usage.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	cmd.Flags().BoolVar(&o.clientOnly, "client", false, "print the plugin's version only, without contacting the cluster")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json or yaml")
	return cmd
}

func (o *options) run(cmd *cobra.Command) error {
	if err := output.Validate(o.output, output.Human, output.JSON, output.YAML); err != nil {
		return err
	}
	v := Versions{Client: buildversion.Get()}
	var serverErr error
	if !o.clientOnly {
		v.Server, serverErr = serverVersion(o.configFlags)
	}
	if o.output != output.Human {
		if err := output.Machine(o.streams.Out, o.output, v); err != nil {
			return err
		}
	} else {
		c := v.Client
		fmt.Fprintf(o.streams.Out, "Client Version: %s\n", c.GitVersion)
		if c.GitCommit != "" {
			fmt.Fprintf(o.streams.Out, "Git Commit: %s\n", c.GitCommit)
		}
		fmt.Fprintf(o.streams.Out, "Go Version: %s %s\n", c.GoVersion, c.Platform)
		if v.Server != "" {
			fmt.Fprintf(o.streams.Out, "Server Version: %s\n", v.Server)
		}
	}
	return serverErr
}

func serverVersion(configFlags *genericclioptions.ConfigFlags) (string, error) {
	clients, err := kube.FromFlags(configFlags, kube.Limits{})
	if err != nil {
		return "", err
	}
	sv, err := clients.Kube.Discovery().ServerVersion()
	if err != nil {
		return "", fmt.Errorf("reading the server version from %s: %w (use --client to skip the server)", clients.Config.Host, err)
	}
	return sv.GitVersion, nil
}
