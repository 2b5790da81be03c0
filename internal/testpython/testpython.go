// Package testpython runs the Python client's tests (clients/python/tests)
// with Debian's pytest against `kubectl sandbox-fleet serve` on a test
// cluster: the plugin built as users build it, its sessions in a namespace
// of the calling test's own.
package testpython

import (
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
	cmd := exec.Command(Python(), append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider"}, tests...)...)
	cmd.Dir = filepath.Join(root, "clients", "python")
	// pytest, and through its own fixtures the serve processes it starts,
	// die with the test binary however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(append(os.Environ(),
		"SANDBOX_FLEET_BIN="+bin,
		"SANDBOX_FLEET_KUBECTL="+filepath.Join(binDir, "kubectl"),
		"KUBECONFIG="+kubeconfig,
		"SANDBOX_FLEET_NAMESPACE="+namespace,
		"PYTHONDONTWRITEBYTECODE=1",
	), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("pytest %v:\n%s", tests, out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}
