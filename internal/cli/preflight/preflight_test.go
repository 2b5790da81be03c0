package preflight

import (
	"bytes"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
)

func TestPrintTable(t *testing.T) {
	r := &preflight.Report{Namespace: "rl", Checks: []preflight.Check{
		{Name: "reachable", Status: preflight.Pass, Detail: "https://127.0.0.1:6443 v1.36.3"},
		{Name: "namespace", Status: preflight.Fail, Detail: `namespace "rl" does not exist`, Fix: "create it with `kubectl create namespace rl`"},
		{Name: "runtimeclass", Status: preflight.Warn, Detail: "no runtime class named", Fix: "name one with --runtime-class to isolate sandboxes"},
	}}
	var out bytes.Buffer
	if err := printTable(&out, r, output.Palette{}); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "preflight", out.String())
}
