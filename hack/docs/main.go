// Command docs writes the generated references into docs/reference: `make
// docs`. docs's test fails when they are not what the code renders.
//
//	go run ./hack/docs [-root DIR]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sandbox-fleet/sandbox-fleet/internal/docgen"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := docgen.Write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(1)
	}
}
