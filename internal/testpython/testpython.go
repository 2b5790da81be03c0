// Package testpython runs the Python client's tests (clients/python/tests)
// with Debian's pytest against `kubectl sandbox-fleet serve` on a test
// cluster: the plugin built as users build it, the client installed as
// users install it (a wheel built from the checkout, in a venv of its own,
// the source tree off sys.path), its sessions in a namespace of the
// calling test's own.
package testpython

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
)

// Python is Debian's interpreter, which has Debian's pytest; another
// python3 first on PATH (pyenv) may not.
func Python() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// Run runs pytest on tests (paths under clients/python) with the cluster
// of kubeconfig and namespace, and env added, and fails t if any fails.
func Run(t *testing.T, kubeconfig, namespace string, tests []string, env ...string) {
	t.Helper()
	if err := exec.Command(Python(), "-c", "import pytest").Run(); err != nil {
		t.Fatalf("Debian's pytest is missing (make node-deps installs python3-pytest): %v", err)
	}
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testcluster.BuildCommand(t.TempDir(), "kubectl-sandbox_fleet")
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	source := filepath.Join(root, "clients", "python")
	python, wheel, err := Install(t.TempDir(), source)
	if err != nil {
		t.Fatal(err)
	}
	// -P: the working directory (the source tree) is not put on sys.path,
	// so the tests import the installed package.
	cmd := exec.Command(python, append([]string{"-P", "-m", "pytest", "-q", "-p", "no:cacheprovider"}, tests...)...)
	cmd.Dir = source
	// pytest, and through its own fixtures the serve processes it starts,
	// die with the test binary however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(append(os.Environ(),
		"SANDBOX_FLEET_BIN="+bin,
		"SANDBOX_FLEET_KUBECTL="+filepath.Join(binDir, "kubectl"),
		"KUBECONFIG="+kubeconfig,
		"SANDBOX_FLEET_NAMESPACE="+namespace,
		"PYTHONDONTWRITEBYTECODE=1",
		"SANDBOX_FLEET_WHEEL="+wheel,
		"SANDBOX_FLEET_SOURCE="+source,
	), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("pytest %v:\n%s", tests, out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}

// Install builds the client's wheel from a copy of source (so that the
// build leaves nothing in the checkout), as `pip install ./clients/python`
// does, and installs it into a new venv under dir that also sees Debian's
// packages (pytest). It returns the venv's interpreter and the wheel.
func Install(dir, source string) (python, wheel string, err error) {
	src := filepath.Join(dir, "src")
	if err := os.CopyFS(filepath.Join(src, "sandbox_fleet"), os.DirFS(filepath.Join(source, "sandbox_fleet"))); err != nil {
		return "", "", err
	}
	for _, name := range []string{"pyproject.toml", "README.md"} {
		data, err := os.ReadFile(filepath.Join(source, name))
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			return "", "", err
		}
	}
	dist := filepath.Join(dir, "dist")
	venv := filepath.Join(dir, "venv")
	python = filepath.Join(venv, "bin", "python")
	steps := [][]string{
		{Python(), "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, src},
		{Python(), "-m", "venv", "--system-site-packages", venv},
	}
	for _, step := range steps {
		if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("%v: %v\n%s\n(make node-deps installs python3-build, python3-venv and python3-setuptools)", step, err, out)
		}
	}
	wheels, err := filepath.Glob(filepath.Join(dist, "*.whl"))
	if err != nil || len(wheels) != 1 {
		return "", "", fmt.Errorf("building the wheel of %s gave %v, want one wheel (%v)", source, wheels, err)
	}
	if out, err := exec.Command(python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheels[0]).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("installing %s: %v\n%s", wheels[0], err, out)
	}
	return python, wheels[0], nil
}
