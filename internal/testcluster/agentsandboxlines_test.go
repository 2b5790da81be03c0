package testcluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
)

// The releases preflight and version call tested are the ones the test
// binaries hold, oldest first, and the default is the newest.
func TestAgentSandboxLines(t *testing.T) {
	b, err := findBinaries()
	if err != nil {
		t.Fatal(err)
	}
	versions, err := b.agentSandboxVersions()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(versions, preflight.TestedAgentSandbox) {
		t.Errorf("test binaries hold Agent Sandbox %v; preflight.TestedAgentSandbox says %v", versions, preflight.TestedAgentSandbox)
	}
	t.Setenv(AgentSandboxEnv, "")
	line, err := b.agentSandbox("")
	if err != nil || line.Version != versions[len(versions)-1] {
		t.Errorf("default line %+v (%v), want the newest, %s", line, err, versions[len(versions)-1])
	}
	for _, v := range versions {
		line, err := b.agentSandbox(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(line.Controller()); err != nil {
			t.Error(err)
		}
		crds, err := line.crdFiles()
		if err != nil || len(crds) != 4 {
			t.Errorf("Agent Sandbox %s: CRDs %v (%v), want its four", v, crds, err)
		}
		if _, err := os.Stat(filepath.Join(line.Manifests(), "kustomization.yaml")); err != nil {
			t.Error(err)
		}
	}
	t.Setenv(AgentSandboxEnv, "v0.0.1")
	if _, err := b.agentSandbox(""); err == nil || !strings.Contains(err.Error(), AgentSandboxEnv) {
		t.Errorf("an unknown line: %v, want an error naming %s", err, AgentSandboxEnv)
	}
}
