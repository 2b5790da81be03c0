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

	"github.com/sandbox-fleet/sandbox-fleet/internal/pywheel"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
)

// Python is Debian's interpreter, which has Debian's pytest; another
// python3 first on PATH (pyenv) may not.
func Python() string { return pywheel.Python() }

// Run runs pytest on tests (paths under clients/python) with the cluster
// of kubeconfig and namespace, and env added, against the client's pure
// wheel built from the checkout, and fails t if any fails.
func Run(t *testing.T, kubeconfig, namespace string, tests []string, env ...string) {
	t.Helper()
	RunWheel(t, "", kubeconfig, namespace, tests, env...)
}

// RunWheel is Run against wheel, a wheel built apart (a platform wheel,
// say); "" builds the pure one.
func RunWheel(t *testing.T, wheel, kubeconfig, namespace string, tests []string, env ...string) {
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
	var python string
	if wheel == "" {
		python, wheel, err = Install(t.TempDir(), source)
	} else {
		python, err = Venv(t.TempDir(), wheel)
	}
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
	wheel, err = pywheel.BuildPure(source, dir)
	if err != nil {
		return "", "", err
	}
	python, err = Venv(dir, wheel)
	return python, wheel, err
}

// Venv makes a new venv under dir that also sees Debian's packages
// (pytest), installs wheel into it (a wheel only, no index, no
// dependencies) and returns its interpreter.
func Venv(dir, wheel string) (python string, err error) {
	venv := filepath.Join(dir, "venv")
	python = filepath.Join(venv, "bin", "python")
	if out, err := exec.Command(pywheel.Python(), "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		return "", fmt.Errorf("python3 -m venv: %v\n%s\n(make node-deps installs python3-venv)", err, out)
	}
	if out, err := exec.Command(python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheel).CombinedOutput(); err != nil {
		return "", fmt.Errorf("installing %s: %v\n%s", wheel, err, out)
	}
	return python, nil
}
