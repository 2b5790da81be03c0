package runid

import (
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// Complete completes a run id — the one argument of a verb, or a
// --run-id flag — from the runs in the namespace the command's flags name.
func Complete(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		clients, err := kube.FromFlags(configFlags, kube.Limits{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		inv, err := inventory.List(cmd.Context(), clients.Client, clients.Namespace, "")
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		var ids []cobra.Completion
		for _, r := range inv.Runs().Items {
			if strings.HasPrefix(r.Name, toComplete) {
				ids = append(ids, r.Name)
			}
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}
