// Package golden compares a printer's output with a file kept beside the
// test, testdata/NAME.golden. Run the tests with -update to rewrite the
// files from the current output, then review the diff.
package golden

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the output")

// Assert fails t unless got equals testdata/name.golden.
func Assert(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (rerun with -update if the change is meant):\n--- got\n%s\n--- want\n%s%s",
			path, got, want, firstDifference(got, string(want)))
	}
}

// firstDifference points at the first line that differs, which in a wide
// table is hard to spot by eye.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("\n--- first difference, line %d:\n got: %q\nwant: %q", i+1, g[i], w[i])
		}
	}
	return ""
}
