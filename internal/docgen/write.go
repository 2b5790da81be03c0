package docgen

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
)

// Dir is where the references go, under the repository's root.
const Dir = "docs/reference"

// Render renders every reference, by path under Dir.
func Render(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for name, page := range CLI(cli.NewCommand(genericiooptions.NewTestIOStreamsDiscard())) {
		out[filepath.Join("cli", name)] = append(page, '\n')
	}
	crds, err := CRDs(filepath.Join(root, "manifests", "crd"))
	if err != nil {
		return nil, err
	}
	for name, page := range crds {
		out[filepath.Join("crd", name)] = page
	}
	config, err := Config(root)
	if err != nil {
		return nil, err
	}
	out["config.md"] = config
	return out, nil
}

// Write writes the references under root, removing pages no command or
// type renders any more.
func Write(root string) error {
	pages, err := Render(root)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, Dir)
	for name, page := range pages {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, page, 0o644); err != nil {
			return err
		}
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".md" {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if _, ok := pages[rel]; !ok {
			return os.Remove(path)
		}
		return nil
	})
}

// Stale lists what under root differs from what Render renders: pages
// changed, missing, or no longer rendered.
func Stale(root string) ([]string, error) {
	pages, err := Render(root)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, Dir)
	var stale []string
	for name, page := range pages {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, page) {
			stale = append(stale, filepath.Join(Dir, name))
		}
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".md" {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if _, ok := pages[rel]; !ok {
			stale = append(stale, fmt.Sprintf("%s (no longer rendered)", filepath.Join(Dir, rel)))
		}
		return nil
	})
	return stale, err
}
