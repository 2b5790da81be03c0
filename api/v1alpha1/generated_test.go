package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The committed CRDs are what controller-gen makes of the types now; run
// `make generate` after changing them.
func TestCRDsAreGenerated(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("go", "tool", "controller-gen", "paths=../../../api/...", "crd:crdVersions=v1", "output:crd:artifacts:config="+out)
	cmd.Dir = "../../hack/tools/controller-gen"
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	generated, err := filepath.Glob(filepath.Join(out, "*.yaml"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("controller-gen made no CRD (%v)", err)
	}
	for _, g := range generated {
		want, _ := os.ReadFile(g)
		committed, err := os.ReadFile(filepath.Join("../../manifests/crd", filepath.Base(g)))
		if err != nil || !bytes.Equal(committed, want) {
			t.Errorf("manifests/crd/%s is not what controller-gen makes of api/ (%v): run `make generate`", filepath.Base(g), err)
		}
	}
}
