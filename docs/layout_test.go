package docs_test

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Layout table of architecture.md names every Go package of the
// repository where it is, and names nothing that is not there: each path
// in a row's first column, each full path in its description, and each
// subdirectory its description lists (a one-segment name ending in "/",
// under the row's first path).
func TestLayout(t *testing.T) {
	listed, err := layoutPaths(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range listed {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("docs/architecture.md's Layout lists %s, which does not exist", p)
		}
	}
	for _, dir := range goPackageDirs(t) {
		if !slices.Contains(listed, dir) {
			t.Errorf("docs/architecture.md's Layout does not list the package %s", dir)
		}
	}
}

var backticked = regexp.MustCompile("`([^`]+)`")

// layoutPaths reads the paths the Layout section's table names, cleaned
// of trailing slashes.
func layoutPaths(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	_, section, _ := strings.Cut(string(b), "\n## Layout\n")
	section, _, _ = strings.Cut(section, "\n## ")
	var paths []string
	for _, line := range strings.Split(section, "\n") {
		cols := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cols) < 2 {
			continue
		}
		var base string
		for _, m := range backticked.FindAllStringSubmatch(cols[0], -1) {
			if base == "" {
				base = m[1]
			}
			paths = append(paths, path.Clean(m[1]))
		}
		for _, m := range backticked.FindAllStringSubmatch(strings.Join(cols[1:], " | "), -1) {
			p := m[1]
			if strings.ContainsAny(p, " =*") || !strings.HasSuffix(p, "/") {
				continue
			}
			if strings.Count(p, "/") == 1 {
				p = path.Join(base, p)
			}
			paths = append(paths, path.Clean(p))
		}
	}
	return paths, nil
}

// goPackageDirs are the directories of the repository's Go packages, in
// every module, relative to its root.
func goPackageDirs(t *testing.T) []string {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	err = filepath.WalkDir(abs, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".cache" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			mods = append(mods, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, mod := range mods {
		cmd := exec.Command("go", "list", "-f", "{{.Dir}}", "./...")
		cmd.Dir = mod
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", mod, err)
		}
		for _, d := range strings.Fields(string(out)) {
			rel, err := filepath.Rel(abs, d)
			if err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
	}
	return dirs
}
