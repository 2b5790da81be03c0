// Package cli builds the `kubectl sandbox-fleet` command tree. Each verb
// lives in its own package; this one only assembles them and maps errors to
// exit codes.
package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/cache"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/describe"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/get"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/loadtest"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/plan"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/prepull"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/reap"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/run"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/serve"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/teardown"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/version"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracing"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and something failed
	ExitUsage   = 2 // bad flags, arguments or input
)

// NewCommand returns the root command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	configFlags := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		// The binary's name, which shell completion scripts complete; help
		// and errors show the display name, as users type it.
		Use:   "kubectl-sandbox_fleet",
		Short: "Run fleets of Agent Sandboxes for RL rollouts and evaluation sweeps",
		Long: `sandbox-fleet turns a batch of tasks, one container image each, into warm
Agent Sandboxes, claims one per task, runs work in it and cleans up.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl sandbox-fleet"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage.Errorf("%w\nSee '%s --help'.", err, c.CommandPath())
	})
	configFlags.AddFlags(cmd.PersistentFlags())
	addKlogFlags(cmd)

	cmd.AddCommand(
		version.NewCommand(configFlags, streams),
		preflight.NewCommand(configFlags, streams),
		run.NewCommand(configFlags, streams),
		serve.NewCommand(configFlags, streams),
		plan.NewCommand(configFlags, streams),
		loadtest.NewCommand(configFlags, streams),
		get.NewCommand(configFlags, streams),
		describe.NewCommand(configFlags, streams),
		reap.NewCommand(configFlags, streams),
		teardown.NewCommand(configFlags, streams),
		cache.NewCommand(configFlags, streams),
		prepull.NewCommand(configFlags, streams),
	)
	// Cobra adds its completion verb to a root with verbs; give it examples.
	cmd.InitDefaultCompletionCmd()
	for _, c := range cmd.Commands() {
		if c.Name() == "completion" {
			c.Example = completionExample
		}
	}
	return cmd
}

const completionExample = `  # Through kubectl (1.26+): kubectl completes a plugin's arguments by running
  # kubectl_complete-sandbox_fleet from PATH; it ships beside the plugin.
  kubectl sandbox-fleet <TAB>

  # The plugin binary called directly, in bash
  source <(kubectl-sandbox_fleet completion bash)`

// addKlogFlags exposes klog's -v, the one logging knob users need.
func addKlogFlags(cmd *cobra.Command) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	cmd.PersistentFlags().AddGoFlag(fs.Lookup("v"))
}

// Execute runs the command line args and returns the exit code. With the
// OTEL_* environment asking for traces it exports the verb's spans over
// OTLP and flushes them before it returns.
func Execute(streams genericiooptions.IOStreams, args []string) int {
	// controller-runtime's caches log with client-go, to klog.
	ctrllog.SetLogger(klog.NewKlogr())
	stopTracing, err := tracing.Start(context.Background(), "kubectl-sandbox-fleet")
	if err != nil {
		fmt.Fprintf(streams.ErrOut, "Warning: no traces: %v\n", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := stopTracing(ctx); err != nil {
			fmt.Fprintf(streams.ErrOut, "Warning: %v\n", err)
		}
	}()
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	c, err := cmd.ExecuteC()
	if err == nil {
		return ExitOK
	}
	// Cobra reports an unknown verb from a command that has no Run of its
	// own, before any verb runs.
	if !c.Runnable() {
		err = usage.Errorf("%w\nSee '%s --help'.", err, c.CommandPath())
	}
	fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	if usage.Is(err) {
		return ExitUsage
	}
	return ExitFailure
}
