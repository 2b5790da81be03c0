package fleet_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run and a session start the same way, through Fleet.Start, so what a
// failed start tells its caller is written in one place: a grep of the
// module's code finds it once.
func TestNothingCreatedWrittenOnce(t *testing.T) {
	var found []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".cache" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), "Nothing was created") {
			found = append(found, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join("..", "..", "pkg", "fleet", "options.go"); len(found) != 1 || found[0] != want {
		t.Errorf("\"Nothing was created\" is written in %v, want only %s (ErrNothingCreated)", found, want)
	}
}
