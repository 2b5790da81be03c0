// Command kubectl-sandbox_fleet is the `kubectl sandbox-fleet` plugin.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
)

func main() {
	os.Exit(cli.Execute(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, os.Args[1:]))
}
