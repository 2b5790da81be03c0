package testcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// AgentSandboxEnv chooses the Agent Sandbox line a test cluster runs, by
// version (v0.5.6, v1.0.1): hack/testbin.sh builds each line pinned in
// hack/tools with its CRDs. Unset, clusters run the newest one built, the
// line users install today; `make test` runs the suites that exercise the
// controller most (e2e, clients/python, faults) on the older line again.
const AgentSandboxEnv = "SANDBOX_FLEET_AGENT_SANDBOX"

// AgentSandboxLine is one Agent Sandbox release as built into the test
// binaries: its controller and its release manifests.
type AgentSandboxLine struct {
	Version string
	dir     string
}

// Controller is the path of the line's agent-sandbox-controller.
func (l AgentSandboxLine) Controller() string {
	return filepath.Join(l.dir, "bin", "agent-sandbox-controller")
}

// Manifests is the directory of the line's release manifests, a
// kustomization whose controller image is a ko:// placeholder.
func (l AgentSandboxLine) Manifests() string { return filepath.Join(l.dir, "k8s") }

// crdFiles are the CRDs of the line's release.
func (l AgentSandboxLine) crdFiles() ([]string, error) {
	return filepath.Glob(filepath.Join(l.Manifests(), "crds", "*.yaml"))
}

// controllerArgs are the flags the line's controller takes to run as the
// test cluster runs it: its extensions on, its webhook off (its server
// would listen on every interface). The v1.0 line has no webhook and
// refuses the flag.
func (l AgentSandboxLine) controllerArgs() []string {
	args := []string{"--extensions"}
	if version.MustParseSemantic(l.Version).LessThan(version.MajorMinor(1, 0)) {
		args = append(args, "--enable-webhook=false")
	}
	return args
}

// AgentSandbox is the Agent Sandbox line of version, or, empty, the one
// a test cluster runs by default, for harnesses that install it elsewhere
// (e2e/kind).
func AgentSandbox(version string) (AgentSandboxLine, error) {
	b, err := findBinaries()
	if err != nil {
		return AgentSandboxLine{}, err
	}
	return b.agentSandbox(version)
}

func (b binaries) agentSandboxVersions() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(b.dir, "agent-sandbox"))
	if err != nil {
		return nil, fmt.Errorf("no Agent Sandbox controller in %s: rerun `make testbin`", b.dir)
	}
	var versions []string
	for _, e := range entries {
		if _, err := version.ParseSemantic(e.Name()); err == nil {
			versions = append(versions, e.Name())
		}
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("no Agent Sandbox controller in %s: rerun `make testbin`", b.dir)
	}
	slices.SortFunc(versions, func(a, b string) int {
		va, vb := version.MustParseSemantic(a), version.MustParseSemantic(b)
		switch {
		case va.LessThan(vb):
			return -1
		case vb.LessThan(va):
			return 1
		}
		return 0
	})
	return versions, nil
}

// agentSandbox is the line version names, or, empty, the one
// AgentSandboxEnv names, else the newest.
func (b binaries) agentSandbox(want string) (AgentSandboxLine, error) {
	versions, err := b.agentSandboxVersions()
	if err != nil {
		return AgentSandboxLine{}, err
	}
	if want == "" {
		want = os.Getenv(AgentSandboxEnv)
	}
	if want == "" {
		want = versions[len(versions)-1]
	}
	if !slices.Contains(versions, want) {
		return AgentSandboxLine{}, fmt.Errorf("Agent Sandbox %s is not among the test binaries (%s has %s): set %s to one of them, or pin it in hack/tools and rerun `make testbin`",
			want, b.dir, strings.Join(versions, ", "), AgentSandboxEnv)
	}
	return AgentSandboxLine{Version: want, dir: filepath.Join(b.dir, "agent-sandbox", want)}, nil
}
