package v1alpha1_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The committed CRDs are what controller-gen makes of the types now; run
// `make generate` after changing them.
func TestCRDsAreGenerated(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("go", "tool", "controller-gen", "paths=../../../api/v1alpha1/...", "crd:crdVersions=v1", "output:crd:artifacts:config="+out)
	cmd.Dir = "../../hack/tools/controller-gen"
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	generated, err := filepath.Glob(filepath.Join(out, "*.yaml"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("controller-gen made no CRD (%v)", err)
	}
	for _, g := range generated {
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(filepath.Join("../../manifests/crd", filepath.Base(g)))
		if err != nil {
			t.Errorf("manifests/crd/%s: %v: run `make generate`", filepath.Base(g), err)
			continue
		}
		if !bytes.Equal(committed, want) {
			t.Errorf("manifests/crd/%s is not what controller-gen makes of api/ (%s): run `make generate`", filepath.Base(g), firstDifference(committed, want))
		}
	}
}

// firstDifference names the first line where committed and generated
// differ.
func firstDifference(committed, generated []byte) string {
	c, g := strings.Split(string(committed), "\n"), strings.Split(string(generated), "\n")
	for i := range min(len(c), len(g)) {
		if c[i] != g[i] {
			return fmt.Sprintf("line %d: committed %q, generated %q", i+1, c[i], g[i])
		}
	}
	return fmt.Sprintf("committed %d lines, generated %d", len(c), len(g))
}
