// Package version implements `kubectl sandbox-fleet version`.
package version

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	buildversion "github.com/sandbox-fleet/sandbox-fleet/pkg/version"
)

// Versions is what the verb reports.
type Versions struct {
	Client buildversion.Info `json:"clientVersion"`
	Server string            `json:"serverVersion,omitempty"`
	// AgentSandbox is the cluster's Agent Sandbox controller.
	AgentSandbox *preflight.ControllerVersion `json:"agentSandboxController,omitempty"`
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
		Long: `Print the plugin's version, the Kubernetes version of the cluster and the
version of its Agent Sandbox controller: the tag of the image of Deployment
agent-sandbox-system/agent-sandbox-controller, as its releases install it, or
else its release line from the API versions the cluster serves. A controller
older than the oldest release sandbox-fleet is tested with gets a warning.`,
		Example: `  # the plugin, the Kubernetes version of the current context and its Agent Sandbox controller
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
		v.Server, v.AgentSandbox, serverErr = serverVersions(cmd.Context(), o.configFlags)
	}
	if v.AgentSandbox != nil {
		if warn := preflight.OlderThanTested(*v.AgentSandbox); warn != "" {
			fmt.Fprintf(o.streams.ErrOut, "Warning: %s\n", warn)
		}
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
		if v.AgentSandbox != nil {
			fmt.Fprintf(o.streams.Out, "Agent Sandbox Controller: %s\n", v.AgentSandbox)
		}
	}
	return serverErr
}

// serverVersions are the API server's version and what the cluster tells
// of its Agent Sandbox controller's.
func serverVersions(ctx context.Context, configFlags *genericclioptions.ConfigFlags) (string, *preflight.ControllerVersion, error) {
	clients, err := kube.FromFlags(configFlags, kube.Limits{})
	if err != nil {
		return "", nil, err
	}
	sv, err := clients.Kube.Discovery().ServerVersion()
	if err != nil {
		return "", nil, fmt.Errorf("reading the server version from %s: %w (use --client to skip the server)", clients.Config.Host, err)
	}
	cv := preflight.ReadControllerVersion(ctx, clients.Kube)
	return sv.GitVersion, &cv, nil
}
