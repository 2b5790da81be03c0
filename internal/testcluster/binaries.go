package testcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// BinDirEnv names the directory of test binaries built by hack/testbin.sh.
// Without it the cluster looks in .cache/testbin/current of the checkout.
const BinDirEnv = "SANDBOX_FLEET_TESTBIN"

// binaries locates what hack/testbin.sh built.
type binaries struct{ dir string }

func findBinaries() (binaries, error) {
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return binaries{}, err
		}
		dir = filepath.Join(root, ".cache", "testbin", "current")
	}
	// Resolve the `current` link, so components keep the paths they were
	// started from (StopDetached compares them) even if it moves on.
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return binaries{}, fmt.Errorf("test binaries not found in %s: run `make testbin` (it builds the pinned versions of hack/tools/go.mod), or set %s to a directory that has them", dir, BinDirEnv)
	}
	b := binaries{dir: dir}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(b.bin(name)); err != nil {
			return binaries{}, fmt.Errorf("test binary %s not found in %s: run `make testbin` (it builds the pinned versions of hack/tools/go.mod), or set %s to a directory that has them", name, dir, BinDirEnv)
		}
	}
	return b, nil
}

func (b binaries) bin(name string) string { return filepath.Join(b.dir, "bin", name) }

// kwokStageFiles are kwok's stock stages for fast node and pod lifecycles.
func (b binaries) kwokStageFiles() ([]string, error) {
	return filepath.Glob(filepath.Join(b.dir, "kwok-stages", "*.yaml"))
}

// ShippedGOMEMLIMIT is the environment setting the Go heap limit the
// Deployment in the manifest file at path (from the checkout's root)
// gives its first container, GOMEMLIMIT=VALUE, none if it gives none: a
// component run as a process collects garbage as its Pod would.
func ShippedGOMEMLIMIT(path string) ([]string, error) {
	docs, err := shippedDocs(path)
	if err != nil {
		return nil, err
	}
	for _, doc := range docs {
		d := &appsv1.Deployment{}
		if err := yaml.Unmarshal([]byte(doc), d); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if d.Kind != "Deployment" || len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		for _, env := range d.Spec.Template.Spec.Containers[0].Env {
			if env.Name == "GOMEMLIMIT" {
				return []string{"GOMEMLIMIT=" + env.Value}, nil
			}
		}
		return nil, nil
	}
	return nil, fmt.Errorf("%s: no Deployment", path)
}

// RepoRoot finds the checkout by walking up from the working directory
// — the package's for a test, the checkout's for a benchmark — for the
// helpers that run what it ships (its manifests, its commands).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "testbin.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cannot find the sandbox-fleet checkout above the working directory; set %s to the test binaries directory", BinDirEnv)
		}
		dir = parent
	}
}

// BinDir is the directory of the test binaries, for tests that run one of
// them themselves (kubectl, kubectl-krew, validate-krew-manifest).
func BinDir() (string, error) {
	b, err := findBinaries()
	if err != nil {
		return "", err
	}
	return filepath.Join(b.dir, "bin"), nil
}

// ShippedRBAC reads the ServiceAccounts and RBAC objects of the manifest
// file at path (from the checkout's root), each decoded strictly into its
// type, so that a harness runs a component with the rights its manifests
// give it and no more. A kind it does not know is an error, for a harness
// must not leave out what an admin would apply.
func ShippedRBAC(path string) ([]client.Object, error) {
	docs, err := shippedDocs(path)
	if err != nil {
		return nil, err
	}
	var objs []client.Object
	for _, doc := range docs {
		var typ metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &typ); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var obj client.Object
		switch typ.Kind {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "Role":
			obj = &rbacv1.Role{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		default:
			return nil, fmt.Errorf("%s: a %s, which is neither a ServiceAccount nor RBAC", path, typ.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, typ.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// shippedDocs are the YAML documents of the manifest file at path, from
// the checkout's root.
func shippedDocs(path string) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\n---\n"), nil
}
