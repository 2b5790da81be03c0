package testimages

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// debianBase is what mmdebstrap installs: a minimal Debian with the tools
// SWE-bench images have.
var debianBase = struct {
	suite, variant string
	packages       []string
}{"bookworm", "minbase", []string{"git", "python3", "ca-certificates"}}

// Problems builds the SWE-bench-like problem images. Their layers are, in
// order: Debian minbase with git and python3 (about 100 MB, made by
// mmdebstrap from Debian's mirror on the first run only), a Python
// environment layer shared by all problems, and the problem's /testbed: a
// git repository whose pristine commit is tagged `pristine`.
func (b *Builder) Problems(ctx context.Context) ([]Image, error) {
	base, err := b.layer("debian-"+debianBase.suite, [][]byte{[]byte(fmt.Sprint(debianBase))}, b.mmdebstrap(ctx))
	if err != nil {
		return nil, err
	}
	env, err := b.layer("pyenv", [][]byte{[]byte(fmt.Sprint(envSeed, envSize))}, tarLayer(pythonEnv))
	if err != nil {
		return nil, err
	}
	images := make([]Image, 0, ProblemCount)
	for n := 1; n <= ProblemCount; n++ {
		files := testbedFiles(n)
		inputs := [][]byte{[]byte(testbedRecipe)}
		for _, f := range sortedKeys(files) {
			inputs = append(inputs, []byte(f), []byte(files[f]))
		}
		testbed, err := b.layer(fmt.Sprintf("testbed-%d", n), inputs, tarLayer(func(w layerWriter) error {
			return gitTestbed(ctx, w, files)
		}))
		if err != nil {
			return nil, err
		}
		img, err := image(Problem(n), v1.Config{
			Cmd:        []string{"/bin/bash"},
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH=/opt/pyenv"},
			WorkingDir: "/testbed",
		}, base, env, testbed)
		if err != nil {
			return nil, err
		}
		images = append(images, img)
	}
	return images, nil
}

// mmdebstrap writes a Debian root file system as a tar stream.
func (b *Builder) mmdebstrap(ctx context.Context) func(io.Writer) error {
	return func(w io.Writer) error {
		if _, err := exec.LookPath("mmdebstrap"); err != nil {
			return fmt.Errorf("the problem images need mmdebstrap (hack/node-deps.sh installs it): %w", err)
		}
		if b.Log != nil {
			b.Log("building the Debian base layer with mmdebstrap (once; about a minute)")
		}
		dir, err := os.MkdirTemp("", "mmdebstrap-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "root.tar")
		cmd := exec.CommandContext(ctx, "mmdebstrap", "--quiet", "--mode=root",
			"--variant="+debianBase.variant, "--include="+strings.Join(debianBase.packages, ","),
			// No documentation or caches: smaller, and closer to real images.
			"--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
			"--dpkgopt=path-exclude=/usr/share/locale/*", "--aptopt=Acquire::Languages \"none\"",
			debianBase.suite, out)
		// Its working files go in dir too, so nothing is left if it is killed.
		cmd.Env = append(os.Environ(), "TMPDIR="+dir)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("mmdebstrap: %v\n%s", err, msg)
		}
		f, err := os.Open(out)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	}
}

// The Python environment layer stands in for a problem's installed
// dependencies: a package of modules plus incompressible data, the same for
// every problem, so that problem images share most of their bytes as real
// SWE-bench images of one repository do.
const (
	envSeed = 1
	envSize = 8 << 20
)

func pythonEnv(w layerWriter) error {
	if err := w.dir("opt", 0o755); err != nil {
		return err
	}
	if err := w.dir("opt/pyenv", 0o755); err != nil {
		return err
	}
	if err := w.dir("opt/pyenv/calcdeps", 0o755); err != nil {
		return err
	}
	if err := w.file("opt/pyenv/calcdeps/__init__.py", 0o644, []byte("def identity(x):\n    return x\n")); err != nil {
		return err
	}
	data := make([]byte, envSize)
	rng := rand.New(rand.NewPCG(envSeed, envSeed))
	for i := 0; i+8 <= len(data); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			data[i+j] = byte(v >> (8 * j))
		}
	}
	return w.file("opt/pyenv/calcdeps/weights.bin", 0o644, data)
}

// testbedFiles is problem n's repository: a calculator whose add() has a
// bug that its test catches.
func testbedFiles(n int) map[string]string {
	return map[string]string{
		"calc.py": fmt.Sprintf("\"\"\"Problem %d.\"\"\"\n\n\ndef add(a, b):\n    return a - b + %d - %d\n", n, n, n),
		"test_calc.py": "import unittest\n\nimport calc\n\n\nclass TestAdd(unittest.TestCase):\n" +
			"    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\n\n" +
			"if __name__ == \"__main__\":\n    unittest.main()\n",
		"README.md":  fmt.Sprintf("# calc, problem %d\n\nFix add() so that `python3 -m unittest` passes.\n", n),
		".gitignore": "__pycache__/\nbuild/\n",
	}
}

// testbedRecipe names how gitTestbed builds a testbed, so that a change to
// it is a new layer in the cache.
const testbedRecipe = "index from read-tree"

// gitTestbed commits files into a new repository, tags the commit
// `pristine`, and adds the repository as /testbed. Fixed author, committer
// and dates make the commit, and so the layer, the same on every run.
func gitTestbed(ctx context.Context, w layerWriter, files map[string]string) error {
	dir, err := os.MkdirTemp("", "testbed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	const date = "2000-01-01T00:00:00Z"
	env := append(os.Environ(), "GIT_AUTHOR_NAME=sandbox-fleet", "GIT_AUTHOR_EMAIL=tests@sandbox-fleet.invalid",
		"GIT_COMMITTER_NAME=sandbox-fleet", "GIT_COMMITTER_EMAIL=tests@sandbox-fleet.invalid",
		"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date, "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"commit", "-q", "-m", "pristine"},
		{"tag", "pristine"},
		// Drop what differs between runs and git versions but is not needed.
		{"gc", "-q", "--prune=now"},
		// An index without the build's file stats, as in a SWE-bench image
		// (git status is clean), and the same on every run.
		{"read-tree", "HEAD"},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir, cmd.Env = dir, env
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
	}
	for _, f := range []string{"hooks", "logs", "description", "COMMIT_EDITMSG", "ORIG_HEAD"} {
		if err := os.RemoveAll(filepath.Join(dir, ".git", f)); err != nil {
			return err
		}
	}
	return w.tree(dir, "testbed")
}
