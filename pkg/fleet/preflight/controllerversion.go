package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
)

// TestedAgentSandbox are the Agent Sandbox releases CI runs sandbox-fleet
// against (pinned in hack/tools and hack/tools/agent-sandbox-v1.0), oldest
// first.
var TestedAgentSandbox = []string{"v0.5.6", "v1.0.1"}

// ControllerVersion is what a cluster tells of its Agent Sandbox
// controller's version.
type ControllerVersion struct {
	// Version is its release (v1.0.1), empty when only its line is known.
	Version string `json:"version,omitempty"`
	// Line is its release line (v1.0), known from its version or from the
	// API versions it serves.
	Line string `json:"line,omitempty"`
	// From says where it was read.
	From string `json:"from,omitempty"`
}

func (v ControllerVersion) String() string {
	switch {
	case v.Version != "":
		return fmt.Sprintf("%s (from %s)", v.Version, v.From)
	case v.Line != "":
		return fmt.Sprintf("the %s line (from %s)", v.Line, v.From)
	}
	return "unknown"
}

// ReadControllerVersion reads the controller's version from the image tag
// of its Deployment as its release manifests and chart install it, else
// its line from the API versions discovery serves (open to every user).
func ReadControllerVersion(ctx context.Context, kc kubernetes.Interface) ControllerVersion {
	return controllerVersion(controllerDeployment(ctx, kc), servedVersions(kc))
}

// servedVersions are the versions of the Agent Sandbox core API group the
// cluster serves, none when discovery fails.
func servedVersions(kc kubernetes.Interface) []string {
	groups, err := kc.Discovery().ServerGroups()
	if err != nil {
		return nil
	}
	var served []string
	for _, g := range groups.Groups {
		if g.Name == sandboxGroup {
			for _, v := range g.Versions {
				served = append(served, v.Version)
			}
		}
	}
	return served
}

// sandboxGroup is the Agent Sandbox core API group.
const sandboxGroup = "agents.x-k8s.io"

// controllerVersion judges the controller's version from its Deployment
// (nil: not found or not readable) and the versions of its API group that
// are served. The v0.x line serves v1alpha1 beside v1beta1; v1.0 dropped it.
func controllerVersion(dep *appsv1.Deployment, served []string) ControllerVersion {
	if dep != nil {
		containers := dep.Spec.Template.Spec.Containers
		for _, c := range containers {
			// Beside sidecars, the container named after the controller.
			if len(containers) > 1 && c.Name != ControllerName {
				continue
			}
			if tag := imageTag(c.Image); tag != "" {
				if v, err := version.ParseSemantic(tag); err == nil {
					return ControllerVersion{Version: tag, Line: fmt.Sprintf("v%d.%d", v.Major(), v.Minor()),
						From: fmt.Sprintf("the image of Deployment %s/%s", ControllerNamespace, ControllerName)}
				}
			}
		}
	}
	from := "the versions of " + sandboxGroup + " served"
	switch {
	case slices.Contains(served, "v1beta1") && slices.Contains(served, "v1alpha1"):
		return ControllerVersion{Line: "v0.x", From: from}
	case slices.Contains(served, "v1beta1"):
		return ControllerVersion{Line: "v1.x", From: from}
	}
	return ControllerVersion{}
}

// imageTag is the tag of image ref, without a digest; empty when it has none.
func imageTag(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	name := ref[strings.LastIndex(ref, "/")+1:]
	if _, tag, ok := strings.Cut(name, ":"); ok {
		return tag
	}
	return ""
}

// OlderThanTested says, for a controller older than the oldest tested
// release, what that means; empty otherwise (newer releases of a tested
// line are expected to work, and an unknown version is not judged).
func OlderThanTested(v ControllerVersion) string {
	have, err := version.ParseSemantic(v.Version)
	if err != nil {
		return ""
	}
	oldest := version.MustParseSemantic(TestedAgentSandbox[0])
	if !have.LessThan(oldest) {
		return ""
	}
	return fmt.Sprintf("Agent Sandbox %s is older than the oldest release sandbox-fleet is tested with (%s; tested: %s): claims, warm pools and teardown may misbehave; upgrade the controller and its CRDs",
		v.Version, TestedAgentSandbox[0], strings.Join(TestedAgentSandbox, ", "))
}

// checkControllerVersion reports the controller's version, and warns below
// the oldest tested one.
func checkControllerVersion(v ControllerVersion) Check {
	const name = "agent-sandbox-version"
	if warn := OlderThanTested(v); warn != "" {
		return Check{Name: name, Status: Warn, Detail: warn, Fix: "install a tested release: https://agent-sandbox.sigs.k8s.io/docs/getting_started/"}
	}
	if v.Version == "" && v.Line == "" {
		return Check{Name: name, Status: Warn, Detail: "neither its Deployment's image nor the API versions served tell the controller's version",
			Fix: "tested releases: " + strings.Join(TestedAgentSandbox, ", ")}
	}
	return Check{Name: name, Status: Pass, Detail: v.String()}
}
