package results_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/results"
)

// A results file says which tasks are done, so that a rerun with
// --results skips them: those whose work ran, whatever its exit code. A
// task the infrastructure failed is done again.
func ExampleDone() {
	dir, err := os.MkdirTemp("", "results")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "results.jsonl")
	w, err := results.Create(path)
	if err != nil {
		panic(err)
	}
	zero, one := 0, 1
	for _, r := range []fleet.Result{
		{ID: "t1", Epoch: 1, ExitCode: &zero, OK: true},
		{ID: "t2", Epoch: 1, ExitCode: &one},
		{ID: "t3", Epoch: 1, Verdict: "infra", Error: "the sandbox was lost"},
	} {
		if err := w.Write(r); err != nil {
			panic(err)
		}
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	done, err := results.Done(path)
	if err != nil {
		panic(err)
	}
	fmt.Println(done[results.Key{Epoch: 1, ID: "t1"}], done[results.Key{Epoch: 1, ID: "t2"}], done[results.Key{Epoch: 1, ID: "t3"}])
	// Output: true true false
}
