package webhook_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// The shipped sandbox Pod entry sends an update of a Pod by
// policy.UpdateCondition, which the policy package tests.
func TestShippedUpdateCondition(t *testing.T) {
	b, err := os.ReadFile("../../manifests/webhook/webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.Unmarshal([]byte(strings.Split(string(b), "\n---\n")[0]), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Webhooks {
		if !strings.HasSuffix(*w.ClientConfig.Service.Path, webhook.MutatePodsPath) {
			continue
		}
		if len(w.MatchConditions) != 1 || w.MatchConditions[0].Name != policy.UpdateConditionName || w.MatchConditions[0].Expression != policy.UpdateCondition {
			t.Errorf("entry %s: matchConditions %+v, want %s: %s", w.Name, w.MatchConditions, policy.UpdateConditionName, policy.UpdateCondition)
		}
		return
	}
	t.Error("no sandbox Pod entry in manifests/webhook/webhooks.yaml")
}

// The shipped other Pod entry sends creations and the updates adding the
// adoptable label by policy.OtherPodUpdateCondition, which the policy
// package tests, and never governs the system's namespaces.
func TestShippedOtherPodCondition(t *testing.T) {
	b, err := os.ReadFile("../../manifests/webhook/webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
			t.Fatal(err)
		}
		for _, w := range cfg.Webhooks {
			if cfg.Kind != "ValidatingWebhookConfiguration" || !strings.HasSuffix(*w.ClientConfig.Service.Path, webhook.ValidateOtherPodsPath) {
				continue
			}
			if len(w.MatchConditions) != 1 || w.MatchConditions[0].Name != policy.OtherPodConditionName || w.MatchConditions[0].Expression != policy.OtherPodUpdateCondition {
				t.Errorf("entry %s: matchConditions %+v, want %s: %s", w.Name, w.MatchConditions, policy.OtherPodConditionName, policy.OtherPodUpdateCondition)
			}
			sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range []string{"kube-system", "sandbox-fleet-system", "sandbox-fleet-agent", "agent-sandbox-system"} {
				if !strings.Contains(sel.String(), ns) {
					t.Errorf("entry %s may govern %s: %s", w.Name, ns, sel)
				}
			}
			return
		}
	}
	t.Error("no other Pod entry in manifests/webhook/webhooks.yaml")
}

// The kustomizations render with kubectl's kustomize and the API server
// accepts every object of the default one and of the scheduler's (a
// server-side dry run, so the test cluster keeps its own setup).
func TestManifests(t *testing.T) {
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", cluster.Kubeconfig()}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Namespaced objects can only be dry-run in a namespace that exists.
	clients, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sandbox-fleet-system", "sandbox-fleet-agent"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := clients.Client.Create(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = clients.Client.Delete(context.Background(), ns) })
	}

	rendered := kubectl("", "kustomize", "../../manifests/default")
	out := kubectl(rendered, "apply", "--dry-run=server", "-f", "-")
	for _, want := range []string{"customresourcedefinition.apiextensions.k8s.io/sandboxpolicies.sandbox-fleet.io",
		"deployment.apps/asrl-webhook", "poddisruptionbudget.policy/asrl-webhook", "priorityclass.scheduling.k8s.io/asrl-webhook",
		"mutatingwebhookconfiguration.admissionregistration.k8s.io/asrl-webhook", "validatingwebhookconfiguration.admissionregistration.k8s.io/asrl-webhook",
		"daemonset.apps/asrl-prepull-agent", "validatingadmissionpolicybinding.admissionregistration.k8s.io/asrl-prepull-agent-own-node"} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run of manifests/default lacks %s:\n%s", want, out)
		}
	}

	certManager := kubectl("", "kustomize", "../../manifests/cert-manager")
	for _, want := range []string{"name: MANAGE_CERTS\n          value: \"false\"", "cert-manager.io/inject-ca-from: sandbox-fleet-system/asrl-webhook", "kind: Certificate"} {
		if !strings.Contains(certManager, want) {
			t.Errorf("manifests/cert-manager lacks %q", want)
		}
	}
	if strings.Contains(certManager, "value: \"true\"") {
		t.Error("manifests/cert-manager still has the webhook manage its certificates")
	}

	// docs/admin.md's patch sets the registries the agent may pull from.
	overlay := t.TempDir()
	abs, err := filepath.Abs("../../manifests/default")
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes resources by relative path only.
	root, err := filepath.Rel(overlay, abs)
	if err != nil {
		t.Fatal(err)
	}
	kustomization := "resources: [" + root + "]\npatches:\n- target: {kind: ConfigMap, name: asrl-prepull-agent}\n  patch: |-\n" +
		"    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: asrl-prepull-agent}\n    data:\n      allowed-registries: mirror.example.com,docker.io/swebench\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	patched := kubectl("", "kustomize", overlay)
	if !strings.Contains(patched, "allowed-registries: mirror.example.com,docker.io/swebench") || strings.Contains(patched, `allowed-registries: ""`) {
		t.Errorf("docs/admin.md's patch does not set the agent's registries:\n%s", patched)
	}

	networkPolicyOverlay(t, abs, bin, kubectl)

	// Under an overlay's namePrefix, every reference to one of the
	// manifests' objects follows it: no field but labels and the names
	// of parts within an object still holds an unprefixed name.
	prefixed := t.TempDir()
	if root, err = filepath.Rel(prefixed, abs); err != nil {
		t.Fatal(err)
	}
	prefix := "namePrefix: team-\nresources: [" + root + ", " + filepath.Join(filepath.Dir(root), "scheduler") + "]\n"
	if err := os.WriteFile(filepath.Join(prefixed, "kustomization.yaml"), []byte(prefix), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ref := range unprefixedReferences(t, kubectl("", "kustomize", prefixed), "team-") {
		t.Errorf("under a namePrefix, %s", ref)
	}

	// The sample policy applies as it is.
	if out := kubectl("", "apply", "--dry-run=server", "-f", "../../examples/sandboxpolicy.yaml"); !strings.Contains(out, "sandboxpolicy.sandbox-fleet.io/baseline created (server dry run)") {
		t.Errorf("the dry run of examples/sandboxpolicy.yaml: %s", out)
	}

	// asrl-scheduler is not in the default set: it is for clusters that
	// can run a second scheduler.
	scheduler := kubectl(kubectl("", "kustomize", "../../manifests/scheduler"), "apply", "--dry-run=server", "-f", "-")
	for _, want := range []string{"deployment.apps/asrl-scheduler", "configmap/asrl-scheduler-config-",
		"clusterrolebinding.rbac.authorization.k8s.io/asrl-scheduler-node-caches", "role.rbac.authorization.k8s.io/asrl-scheduler-leader-election"} {
		if !strings.Contains(scheduler, want) {
			t.Errorf("the dry run of manifests/scheduler lacks %s:\n%s", want, scheduler)
		}
	}
}

// unprefixedReferences reads rendered manifests whose objects were renamed
// with prefix and lists the fields still holding one of their old names.
// Labels, selectors and the names of an object's own parts (containers,
// ports, volumes, conditions) are not references.
func unprefixedReferences(t *testing.T, rendered, prefix string) []string {
	t.Helper()
	var objects []map[string]any
	old := map[string]bool{}
	for _, doc := range strings.Split(rendered, "\n---\n") {
		obj := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, obj)
		meta, _ := obj["metadata"].(map[string]any)
		if name, _ := meta["name"].(string); strings.HasPrefix(name, prefix) {
			old[strings.TrimPrefix(name, prefix)] = true
		}
	}
	labelled := map[string]bool{"labels": true, "matchLabels": true, "selector": true, "nodeSelector": true}
	parts := map[string]bool{"containers": true, "ports": true, "volumes": true, "volumeMounts": true, "matchConditions": true}
	var found []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if labelled[k] {
					continue
				}
				if parts[k] {
					// Within a part, its own name is no reference.
					if list, ok := x.([]any); ok {
						for i, e := range list {
							if m, ok := e.(map[string]any); ok {
								m = maps.Clone(m)
								delete(m, "name")
								walk(fmt.Sprintf("%s.%s[%d]", path, k, i), m)
							}
						}
					}
					continue
				}
				walk(path+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		case string:
			if old[v] && !strings.HasSuffix(path, ".metadata.name") {
				found = append(found, fmt.Sprintf("%s is still %q", path, v))
			}
		}
	}
	for _, obj := range objects {
		meta, _ := obj["metadata"].(map[string]any)
		walk(fmt.Sprint(obj["kind"], "/", meta["name"]), obj)
	}
	return found
}

// networkPolicyOverlay: manifests/webhook-network-policy, added to the
// default set as its comment says, renders a NetworkPolicy the API server
// accepts once the control plane's CIDR is set — and refuses, naming the
// placeholder, while it is not — that selects the webhook's Pods and
// names ports their containers have. (No network plugin of the test
// cluster enforces it.)
func networkPolicyOverlay(t *testing.T, defaultSet, bin string, kubectl func(stdin string, args ...string) string) {
	t.Helper()
	component, err := filepath.Abs("../../manifests/webhook-network-policy")
	if err != nil {
		t.Fatal(err)
	}
	overlay := func(patch string) string {
		dir := t.TempDir()
		set, err := filepath.Rel(dir, defaultSet)
		if err != nil {
			t.Fatal(err)
		}
		comp, err := filepath.Rel(dir, component)
		if err != nil {
			t.Fatal(err)
		}
		k := "resources: [" + set + "]\ncomponents: [" + comp + "]\n" + patch
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		return kubectl("", "kustomize", dir)
	}
	rendered := overlay("patches:\n- target: {kind: NetworkPolicy, name: asrl-webhook}\n  patch: |-\n" +
		"    - {op: replace, path: /spec/ingress/0/from/0/ipBlock/cidr, value: 10.0.0.0/28}\n")
	if out := kubectl(rendered, "apply", "--dry-run=server", "-f", "-"); !strings.Contains(out, "networkpolicy.networking.k8s.io/asrl-webhook created (server dry run)") {
		t.Errorf("the dry run of the default set with the NetworkPolicy lacks it:\n%s", out)
	}
	var np networkingv1.NetworkPolicy
	var deployment appsv1.Deployment
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		var err error
		switch meta.Kind {
		case "NetworkPolicy":
			err = yaml.Unmarshal([]byte(doc), &np)
		case "Deployment":
			err = yaml.Unmarshal([]byte(doc), &deployment)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if np.Namespace != deployment.Namespace || deployment.Name != "asrl-webhook" {
		t.Fatalf("the NetworkPolicy is in %q, the webhook's Deployment %q in %q", np.Namespace, deployment.Name, deployment.Namespace)
	}
	if args := deployment.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--callers-by-network-policy") {
		t.Errorf("with the NetworkPolicy the webhook is not told it guards the callers: %v", args)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(deployment.Spec.Template.Labels)) {
		t.Errorf("the NetworkPolicy's podSelector %v does not select the webhook's Pods (%v)", np.Spec.PodSelector, err)
	}
	ports := map[string]bool{}
	for _, c := range deployment.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
	}
	var allowed []string
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			allowed = append(allowed, p.Port.String())
			if !ports[p.Port.String()] {
				t.Errorf("the NetworkPolicy lets in port %s, which no container of the webhook names", p.Port)
			}
		}
	}
	if !slices.Equal(allowed, []string{"webhook", "metrics"}) || np.Spec.Ingress[0].From[0].IPBlock == nil {
		t.Errorf("the NetworkPolicy lets in %v (the first from %+v), want the webhook port from an ipBlock, then metrics", allowed, np.Spec.Ingress[0].From)
	}

	// Left unset, the placeholder is refused by name.
	cmd := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", cluster.Kubeconfig(), "apply", "--dry-run=server", "-f", "-")
	cmd.Stdin = strings.NewReader(overlay(""))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "SET-TO-YOUR-CONTROL-PLANE-CIDR") {
		t.Errorf("the NetworkPolicy with its placeholder: %v\n%s; want refused naming it", err, out)
	}
}
