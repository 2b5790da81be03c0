package fleetv1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The committed Go code is what protogen makes of fleet.proto now; run
// `make generate` after changing it.
func TestGoCodeIsGenerated(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("go", "run", ".", "-root", "../../..", "-out", out, "api/fleet/v1/fleet.proto")
	cmd.Dir = "../../../hack/tools/protogen"
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protogen: %v\n%s", err, b)
	}
	for _, f := range []string{"fleet.pb.go", "fleetv1connect/fleet.connect.go"} {
		want, err := os.ReadFile(filepath.Join(out, "api/fleet/v1", f))
		if err != nil {
			t.Fatalf("protogen made no %s: %v", f, err)
		}
		committed, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("api/fleet/v1/%s: %v: run `make generate`", f, err)
			continue
		}
		if !bytes.Equal(committed, want) {
			t.Errorf("api/fleet/v1/%s is not what protogen makes of fleet.proto: run `make generate`", f)
		}
	}
}
