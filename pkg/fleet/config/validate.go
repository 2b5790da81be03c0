package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// FieldError is a field of a configuration whose value is not allowed.
type FieldError struct {
	// Path is the field's path in the file, e.g. recycle.maxReuses.
	Path    string
	Message string
}

// Validate checks a configuration with its defaults filled in — as Default
// and Parse return it, then changed by a caller (command-line flags) — by
// the rules Parse checks a file by. The error joins a *FieldError for
// each field that is not allowed.
func (f *Fleet) Validate() error {
	var errs []error
	f.validate(func(path, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	})
	return errors.Join(errs...)
}

// validate reports every value out of range through fail, by field path.
func (f *Fleet) validate(fail func(path, format string, args ...any)) {
	f.validateChoices(fail)
	f.validateNumbers(fail)
	f.Recycle.validate(fail)
	f.validateClusters(fail)
	switch f.Template.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		fail("template.imagePullPolicy", "%q is not Always, IfNotPresent or Never", f.Template.ImagePullPolicy)
	}
	f.Template.validateExtras(fail)
	for i, r := range f.Rewrite {
		if _, err := images.ParseRule(r.From + "=" + r.To); err != nil {
			fail(fmt.Sprintf("rewrite[%d]", i), "%v", err)
		}
	}
	for k, v := range f.Labels {
		for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
			fail("labels."+k, "%s", msg)
		}
	}
}

// validateChoices checks the fields that name one of a list.
func (f *Fleet) validateChoices(fail func(path, format string, args ...any)) {
	if f.APIVersion != APIVersion || f.Kind != Kind {
		fail("apiVersion", "want apiVersion %s and kind %s, got %q and %q", APIVersion, Kind, f.APIVersion, f.Kind)
	}
	if !slices.Contains(Strategies, f.Strategy) {
		fail("strategy", "unknown strategy %q: use one of %s", f.Strategy, strings.Join(Strategies, ", "))
	}
	if !slices.Contains(ClaimPacings, f.ClaimPacing) {
		fail("claimPacing", "unknown claim pacing %q: use one of %s", f.ClaimPacing, strings.Join(ClaimPacings, ", "))
	}
	if !slices.Contains(Placements, f.Placement) {
		fail("placement", "unknown placement %q: use one of %s", f.Placement, strings.Join(Placements, ", "))
	}
}

// validateNumbers checks the counts, rates, factors, durations and sizes.
func (f *Fleet) validateNumbers(fail func(path, format string, args ...any)) {
	// Fields with a default must be positive once it is filled in (a
	// file's 0 means the default; a flag's 0 is refused); the others may
	// be 0, which means none or unset, as their documentation says.
	for _, v := range []struct {
		path  string
		value int
		least int
	}{
		{"maxConcurrent", f.MaxConcurrent, 0}, {"concurrency", f.Concurrency, 0}, {"windowSize", f.WindowSize, 0},
		{"maxLiveSandboxes", f.MaxLiveSandboxes, 0}, {"disk.nodes", f.Disk.Nodes, 0}, {"kubeAPIBurst", f.KubeAPIBurst, 0},
		{"maxWarmPoolSize", f.MaxWarmPoolSize, 1}, {"epochs", f.Epochs, 1}, {"breakerPolls", f.BreakerPolls, 1},
		{"recycle.maxReuses", f.Recycle.MaxReuses, 1},
	} {
		switch {
		case v.value >= v.least:
		case v.least == 0:
			fail(v.path, "must not be negative, got %d", v.value)
		default:
			fail(v.path, "must be at least %d, got %d", v.least, v.value)
		}
	}
	if f.KubeAPIQPS < 0 {
		fail("kubeAPIQPS", "must not be negative, got %g", f.KubeAPIQPS)
	}
	if f.WarmCreateBudget != nil && *f.WarmCreateBudget < 0 {
		fail("warmCreateBudget", "must not be negative (0 fills every pool at once), got %d", *f.WarmCreateBudget)
	}
	if f.OvercommitFactor != nil && *f.OvercommitFactor != 0 && *f.OvercommitFactor < 1 {
		fail("overcommitFactor", "must be at least 1 (or 0 to turn the breaker off), got %g", *f.OvercommitFactor)
	}
	for _, d := range []struct {
		path  string
		value time.Duration
	}{
		{"readyTimeout", f.ReadyTimeout.Duration}, {"breakerInterval", f.BreakerInterval.Duration},
		{"claimGrace", f.ClaimGrace.Duration}, {"unschedulableGrace", f.UnschedulableGrace.Duration},
		{"controllerGrace", f.ControllerGrace.Duration}, {"agentSilence", f.AgentSilence.Duration},
		{"recycle.resetTimeout", f.Recycle.ResetTimeout.Duration},
	} {
		if d.value <= 0 {
			fail(d.path, "must be positive, got %s", d.value)
		}
	}
	if h := f.Disk.Headroom; h != nil && (*h < 0 || *h >= 1) {
		fail("disk.headroom", "must be a fraction in [0, 1), got %g", *h)
	}
	if f.Disk.AvgImageGB < 0 || f.Disk.NodeEphemeralGB < 0 {
		fail("disk", "sizes must be positive GB")
	}
}

// validate checks the reset's kind and paths (its counts and timeout are
// checked with the others).
func (r *Recycle) validate(fail func(path, format string, args ...any)) {
	if !slices.Contains(Resets, r.Reset) {
		fail("recycle.reset", "unknown reset %q: use %s", r.Reset, strings.Join(Resets, ", "))
	}
	if w := r.Workdir; w != "" && !strings.HasPrefix(w, "/") {
		fail("recycle.workdir", "%q is not an absolute path", w)
	}
	for i, file := range r.CheckConfig.Files {
		if !strings.HasPrefix(file, "/") {
			fail(fmt.Sprintf("recycle.checkConfig.files[%d]", i), "%q is not an absolute path", file)
		}
	}
	for i, c := range r.CheckConfig.Commands {
		if strings.TrimSpace(c) == "" {
			fail(fmt.Sprintf("recycle.checkConfig.commands[%d]", i), "empty command")
		}
	}
}

// validateClusters checks each cluster's entry, and that their names are
// distinct.
func (f *Fleet) validateClusters(fail func(path, format string, args ...any)) {
	names := map[string]bool{}
	for i, c := range f.Clusters {
		path := fmt.Sprintf("clusters[%d]", i)
		switch {
		case c.Name == "":
			fail(path+".name", "every cluster needs a name")
		case names[c.Name]:
			fail(path+".name", "duplicate cluster name %q", c.Name)
		}
		names[c.Name] = true
		if c.Weight < 0 {
			fail(path+".weight", "must be positive, got %g", c.Weight)
		}
		if c.InCluster && (c.Kubeconfig != "" || c.Context != "") {
			fail(path+".inCluster", "inCluster excludes kubeconfig and context")
		}
		if c.Namespace != "" {
			for _, msg := range validation.IsDNS1123Label(c.Namespace) {
				fail(path+".namespace", "%q is not a namespace name: %s", c.Namespace, msg)
			}
		}
		if c.MaxReplicas < 0 {
			fail(path+".maxReplicas", "must not be negative, got %d", c.MaxReplicas)
		}
	}
}

// validateExtras checks what the template adds to the generated objects:
// the agent server and the extra template fields.
func (t *Template) validateExtras(fail func(path, format string, args ...any)) {
	if a := t.AgentServer; a != nil {
		a.validate(fail)
	}
	if t.ExtraTemplateSpec == nil {
		return
	}
	if _, ok := t.ExtraTemplateSpec["podTemplate"]; ok {
		fail("template.extraTemplateSpec.podTemplate", "the Pod is the template's own: set its fields in template.extraPodSpec")
	}
	raw, err := json.Marshal(t.ExtraTemplateSpec)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err = dec.Decode(&extensionsv1beta1.SandboxTemplateSpec{})
	}
	if err != nil {
		fail("template.extraTemplateSpec", "not a SandboxTemplate spec of Agent Sandbox %s: %v", extensionsv1beta1.GroupVersion.Version, err)
	}
}

func (a *AgentServer) validate(fail func(path, format string, args ...any)) {
	const path = "template.agentServer"
	if len(a.Command) == 0 {
		fail(path+".command", "the command that starts the server is required")
	}
	if a.Port < 1 || a.Port > 65535 {
		fail(path+".port", "%d is not a port", a.Port)
	}
	if !strings.HasPrefix(a.HealthPath, "/") {
		fail(path+".healthPath", "%q is not an absolute HTTP path", a.HealthPath)
	}
	if a.Image != "" {
		if _, err := images.Normalize(a.Image); err != nil {
			fail(path+".image", "%v", err)
		}
		if !strings.HasPrefix(a.Path, "/") || a.Path == "/" {
			fail(path+".path", "%q: the directory the server is copied from must be absolute, and not /", a.Path)
		}
	}
	for _, msg := range validation.IsEnvVarName(a.SessionKeyEnv) {
		fail(path+".sessionKeyEnv", "%q: %s", a.SessionKeyEnv, msg)
	}
	switch {
	case a.SessionKeySecret != "":
		for _, msg := range validation.IsDNS1123Subdomain(a.SessionKeySecret) {
			fail(path+".sessionKeySecret", "%q is not a Secret name: %s", a.SessionKeySecret, msg)
		}
	case !a.AllowWithoutSessionKey:
		fail(path+".sessionKeySecret", "a server without a session key can be driven by anyone who reaches the Pod: "+
			"name a Secret with the key \"session-key\", or set allowWithoutSessionKey: true")
	}
	if a.StartupTimeout.Duration < time.Second {
		fail(path+".startupTimeout", "%s is less than a second", a.StartupTimeout.Duration)
	}
}
