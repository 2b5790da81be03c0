package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// sandboxPolicy is the test's policy for namespace ns: a mirror with an
// allowed registry, a runtime class, limit caps and colocation.
func sandboxPolicy(ns string) *v1alpha1.SandboxPolicy {
	return &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "policy-" + ns}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		Images: &v1alpha1.ImagePolicy{
			Rewrite:           []v1alpha1.ImageRewrite{{From: "docker.io", To: "mirror.example.com/hub"}},
			AllowedRegistries: []string{"mirror.example.com"},
		},
		RuntimeClassName: "sandboxed-" + ns,
		Colocation:       &v1alpha1.ColocationPolicy{Weight: 100},
		OtherPodSelector: &metav1.LabelSelector{MatchLabels: besideSandboxes},
	}}
}

// besideSandboxes labels the Pods sandboxPolicy lets run beside its
// sandbox Pods.
var besideSandboxes = map[string]string{"role": "beside-sandboxes"}

func sandboxTemplate(ns, name string, edit func(*corev1.PodSpec)) *extensionsv1beta1.SandboxTemplate {
	tmpl := &extensionsv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels.ForRun("other-client-run")}}
	tmpl.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "sandbox", Image: "busybox:1.36", Command: []string{"sleep", "infinity"}}}
	if edit != nil {
		edit(&tmpl.Spec.PodTemplate.Spec)
	}
	return tmpl
}

// startWebhook runs the built webhook for the tests of namespace ns as
// its users run it (testwebhook.Start) until the test ends, and returns it
// with clients of ns.
func startWebhook(t *testing.T, ns string) (*testwebhook.Server, *kube.Clients) {
	t.Helper()
	bin, err := testcluster.BuildCommand(t.TempDir(), "asrl-webhook")
	if err != nil {
		t.Fatal(err)
	}
	s, err := testwebhook.Start(context.Background(), cluster, ns, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	return s, clients
}

// webhookTest is what TestWebhook's cases share: the built webhook
// running against the test cluster, a namespace its policy governs, the
// policy and its runtime class, and a client. The cases run in order: the
// counts and the policy changes depend on what ran before them.
type webhookTest struct {
	ns      string
	s       *testwebhook.Server
	clients *kube.Clients
	c       client.Client
	rc      *nodev1.RuntimeClass
	pol     *v1alpha1.SandboxPolicy
}

func TestWebhook(t *testing.T) {
	w := newWebhookTest(t)
	t.Run("warm pool Pods follow the policy", w.warmPoolPodsFollowThePolicy)
	t.Run("templates are mutated, so their Pods need no patch", w.templatesAreMutated)
	t.Run("ephemeral containers are checked as they are added", w.ephemeralContainersAreChecked)
	t.Run("other Pods are untouched where the policy selects them", w.otherPodsAreUntouched)
	t.Run("a template asking for the host network is denied", w.hostNetworkTemplateDenied)
	t.Run("server-side dry run shows the mutation and creates nothing", w.serverSideDryRun)
	t.Run("only the API server may call it", w.onlyTheAPIServerMayCall)
	t.Run("bad admission reviews get a clear answer", w.badReviewsGetAClearAnswer)
	t.Run("policy status counts what it did", w.policyStatusCounts)
	t.Run("one replica is elected to write the configurations", w.oneReplicaIsElected)
	t.Run("health, readiness and metrics are served", w.healthReadinessAndMetrics)
	t.Run("metrics answer only tokens allowed them", w.metricsOnlyForAllowedTokens)
	t.Run("a namespace labelled into a policy is governed with no rewrite of the entries", w.namespaceLabelledIntoAPolicy)
	t.Run("a policy is in force once its creation or change returns", w.policyInForceOnceWritten)
	t.Run("with the webhook down only sandbox Pods it must see are refused", w.webhookDown)
}

// newWebhookTest starts the webhook with a policy of its namespace in
// force: a dry-run sandbox Pod comes back from the mirror.
func newWebhookTest(t *testing.T) *webhookTest {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	s, clients := startWebhook(t, ns)
	c := clients.Client
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed-" + ns}, Handler: "runsc"}
	pol := sandboxPolicy(ns)
	for _, obj := range []client.Object{rc, pol} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
	}
	// The policy is in force once the webhook's cache has it: a dry-run
	// sandbox Pod comes back from the mirror.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: "probe"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
		if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
			return false, nil
		}
		return strings.HasPrefix(pod.Spec.Containers[0].Image, "mirror.example.com/"), nil
	})
	if err != nil {
		t.Fatalf("the policy did not come into force: %v", err)
	}

	return &webhookTest{ns: ns, s: s, clients: clients, c: c, rc: rc, pol: pol}
}

func (w *webhookTest) warmPoolPodsFollowThePolicy(t *testing.T) {
	ctx := context.Background()
	ns, c, rc := w.ns, w.c, w.rc
	// A template and pool as another client would make them: the run
	// label on the objects, not in the Pod template.
	tmpl := sandboxTemplate(ns, "other-client", nil)
	replicas := int32(2)
	pool := &extensionsv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "other-client", Namespace: ns, Labels: labels.ForRun("other-client-run")}}
	pool.Spec.Replicas = &replicas
	pool.Spec.TemplateRef.Name = tmpl.Name
	for _, obj := range []client.Object{tmpl, pool} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	pods := &corev1.PodList{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.List(ctx, pods, client.InNamespace(ns), client.HasLabels{policy.SandboxPodLabel})
		return err == nil && len(pods.Items) >= 2, err
	})
	if err != nil {
		t.Fatalf("the pool made %d Pods: %v", len(pods.Items), err)
	}
	for _, p := range pods.Items {
		spec := p.Spec
		if got := spec.Containers[0].Image; got != "mirror.example.com/hub/library/busybox:1.36" {
			t.Errorf("Pod %s: image %s, want the mirror's", p.Name, got)
		}
		if got := p.Annotations[labels.OriginalImage]; got != "busybox:1.36" {
			t.Errorf("Pod %s: original image %q", p.Name, got)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken ||
			spec.SecurityContext == nil || spec.SecurityContext.SeccompProfile == nil ||
			spec.Containers[0].SecurityContext == nil || *spec.Containers[0].SecurityContext.AllowPrivilegeEscalation {
			t.Errorf("Pod %s lacks the security defaults: %+v", p.Name, spec)
		}
		if spec.RuntimeClassName == nil || *spec.RuntimeClassName != rc.Name {
			t.Errorf("Pod %s: runtime class %v, want %s", p.Name, spec.RuntimeClassName, rc.Name)
		}
		if p.Labels[labels.RunID] != "other-client-run" {
			t.Errorf("Pod %s: run label %q, want the pool's", p.Name, p.Labels[labels.RunID])
		}
		if spec.Affinity == nil || spec.Affinity.PodAffinity == nil || len(spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("Pod %s: no colocation affinity: %+v", p.Name, spec.Affinity)
		}
	}
}

func (w *webhookTest) templatesAreMutated(t *testing.T) {
	ctx := context.Background()
	ns, s, c := w.ns, w.s, w.c
	tmpl := sandboxTemplate(ns, "mutated", nil)
	if err := c.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	pt := tmpl.Spec.PodTemplate
	if pt.Spec.Containers[0].Image != "mirror.example.com/hub/library/busybox:1.36" || pt.ObjectMeta.Annotations[labels.OriginalImage] != "busybox:1.36" ||
		pt.Spec.RuntimeClassName == nil || pt.Spec.SecurityContext == nil || pt.Spec.SecurityContext.SeccompProfile == nil ||
		pt.ObjectMeta.Labels[labels.RunID] != "other-client-run" {
		t.Errorf("the stored template's Pod template does not follow the policy: %+v", pt)
	}
	if pt.ObjectMeta.Labels[policy.ColocateLabel] != tmpl.Name || pt.Spec.Affinity == nil || pt.Spec.Affinity.PodAffinity == nil ||
		pt.Spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels[policy.ColocateLabel] != tmpl.Name {
		t.Errorf("the template's Pods are not colocated by its own label: %+v %+v", pt.ObjectMeta.Labels, pt.Spec.Affinity)
	}
	// A Pod made from it needs nothing from the webhook: the API
	// server's CEL condition lets it through without a call.
	before := podAdmissions(t, s)
	if err := c.Create(ctx, fromTemplate(tmpl, "compliant"), client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if after := podAdmissions(t, s); after != before {
		t.Errorf("the webhook was called for a Pod from the mutated template: %v Pod admissions → %v", before, after)
	}
}

func (w *webhookTest) ephemeralContainersAreChecked(t *testing.T) {
	ctx := context.Background()
	ns, clients, c, pol := w.ns, w.clients, w.c, w.pol
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debugged", Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: "debugged"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	add := func(edit func(*corev1.EphemeralContainer)) error {
		// The node binds and runs the Pod meanwhile: update the latest.
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			withDebug, err := clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			e := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(*pod.Spec.Containers[0].DeepCopy())}
			e.Name = "debug"
			edit(&e)
			withDebug.Spec.EphemeralContainers = []corev1.EphemeralContainer{e}
			_, err = clients.Kube.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, pod.Name, withDebug, metav1.UpdateOptions{})
			return err
		})
	}
	err := add(func(e *corev1.EphemeralContainer) { e.SecurityContext.Privileged = ptr.To(true) })
	want := fmt.Sprintf(`denied by SandboxPolicy %q: spec.ephemeralContainers[0].securityContext.privileged: privileged containers are not allowed`, pol.Name)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("adding a privileged debug container: %v, want a denial saying %q", err, want)
	}
	if err := add(func(*corev1.EphemeralContainer) {}); err != nil {
		t.Errorf("adding a debug container as the policy makes a container: %v", err)
	}
}

// A Pod that is no sandbox is left as it is where the policy's
// otherPodSelector selects it, and refused, saying why, where not.
func (w *webhookTest) otherPodsAreUntouched(t *testing.T) {
	ctx := context.Background()
	ns, c, pol := w.ns, w.c, w.pol
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns, Labels: besideSandboxes},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if pod.Spec.Containers[0].Image != "busybox:1.36" || pod.Annotations[labels.OriginalImage] != "" || pod.Spec.RuntimeClassName != nil {
		t.Errorf("a Pod without the sandbox label was changed: %+v", pod.Spec)
	}
	unselected := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unselected", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
	err := c.Create(ctx, unselected)
	want := fmt.Sprintf(`Pod %s/unselected: denied by SandboxPolicy %q: metadata.labels: the Pod is no sandbox Pod`, ns, pol.Name)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a Pod neither a sandbox nor selected by otherPodSelector: %v, want %q", err, want)
	}
}

func (w *webhookTest) hostNetworkTemplateDenied(t *testing.T) {
	ctx := context.Background()
	ns, c, pol := w.ns, w.c, w.pol
	tmpl := sandboxTemplate(ns, "host-net", func(s *corev1.PodSpec) { s.HostNetwork = true })
	err := c.Create(ctx, tmpl)
	want := fmt.Sprintf(`denied by SandboxPolicy %q: spec.podTemplate.spec.hostNetwork: host namespaces are not allowed`, pol.Name)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("creating the template: %v, want a denial saying %q", err, want)
	}
}

func (w *webhookTest) serverSideDryRun(t *testing.T) {
	ctx := context.Background()
	ns, c := w.ns, w.c
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: dry, namespace: %s, labels: {%s: dry}}
spec: {containers: [{name: sandbox, image: "busybox:1.36"}]}
`, ns, policy.SandboxPodLabel)
	cmd := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", cluster.Kubeconfig(), "apply", "--dry-run=server", "-o", "json", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server: %v", err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil || pod.Spec.Containers[0].Image != "mirror.example.com/hub/library/busybox:1.36" {
		t.Errorf("the dry run does not show the rewrite (%v):\n%s", err, out)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dry"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry run created the Pod: %v", err)
	}
}

func (w *webhookTest) onlyTheAPIServerMayCall(t *testing.T) {
	ctx := context.Background()
	ns, s, c := w.ns, w.s, w.c
	// A SandboxPolicy creation selecting every namespace, made up: were
	// it admitted, it would be written as a pending entry.
	forged, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": "f0", "operation": "CREATE", "name": "forged",
			"kind":     map[string]string{"group": "sandbox-fleet.io", "version": "v1alpha1", "kind": "SandboxPolicy"},
			"resource": map[string]string{"group": "sandbox-fleet.io", "version": "v1alpha1", "resource": "sandboxpolicies"},
			"object": map[string]any{"apiVersion": "sandbox-fleet.io/v1alpha1", "kind": "SandboxPolicy",
				"metadata": map[string]any{"name": "forged", "uid": "f0", "generation": 1}, "spec": map[string]any{}},
		},
	})
	pending := func() string {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Name: "asrl-webhook-" + ns + webhook.PoliciesSuffix}, m); err != nil {
			t.Fatal(err)
		}
		return m.Annotations["sandbox-fleet.io/pending-policies"] + fmt.Sprint(len(m.Webhooks))
	}
	before := pending()
	adminCert, adminKey := filepath.Join(cluster.Dir(), "pki", "admin.crt"), filepath.Join(cluster.Dir(), "pki", "admin.key")
	admin, err := tls.LoadX509KeyPair(adminCert, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, cert := range map[string][]tls.Certificate{"no certificate": nil, "another certificate of the cluster's CA": {admin}} {
		caller := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: cert}}}
		resp, err := caller.Post(s.URL+"/validate-sandbox-policies", "application/json", bytes.NewReader(forged))
		if err == nil {
			resp.Body.Close()
			t.Errorf("a review from a caller with %s was answered %d", name, resp.StatusCode)
		}
	}
	if after := pending(); after != before {
		t.Errorf("refused reviews wrote pending entries: %s → %s", before, after)
	}
}

func (w *webhookTest) badReviewsGetAClearAnswer(t *testing.T) {
	ns, s := w.ns, w.s
	insecure := s.AsAPIServer()
	many := make([]map[string]any, 300)
	for i := range many {
		many[i] = map[string]any{"name": fmt.Sprintf("c%d", i), "image": "busybox:1.36", "bogusField": true}
	}
	podWithMany, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{policy.SandboxPodLabel: "x"}},
		"spec": map[string]any{"containers": many, "unknownField": 1}})
	for _, tt := range []struct {
		name, body, want string
	}{
		{"not json", "{not json", `"code":400`},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, `"code":400`},
		{"a Pod that is not one", review(ns, []byte(`{"spec":{"containers":"nope"}}`)), `"code":400`},
		{"300 containers and unknown fields", review(ns, podWithMany), `"allowed":true`},
	} {
		resp, err := insecure.Post(s.URL+webhook.MutatePodsPath, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if !strings.Contains(b.String(), tt.want) {
			t.Errorf("%s: answer %d %s, want it to hold %s", tt.name, resp.StatusCode, b.String(), tt.want)
		}
	}
}

func (w *webhookTest) policyStatusCounts(t *testing.T) {
	ctx := context.Background()
	ns, c, pol := w.ns, w.c, w.pol
	// The pool's Pods came compliant from their template; a sandbox
	// Pod written by hand is mutated.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hand-written", Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: "hand"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha1.SandboxPolicy{}
		err := c.Get(ctx, client.ObjectKeyFromObject(pol), got)
		return err == nil && got.Status.MutatedPods >= 1 && got.Status.DeniedPods >= 1, err
	})
	if err != nil {
		t.Errorf("the policy status does not count the mutations and the denial: %v", err)
	}
}

func (w *webhookTest) oneReplicaIsElected(t *testing.T) {
	ctx := context.Background()
	ns, c := w.ns, w.c
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "asrl-webhook-" + ns}, lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("the election's Lease has no holder: %+v", lease.Spec)
	}
}

func (w *webhookTest) healthReadinessAndMetrics(t *testing.T) {
	ctx := context.Background()
	s := w.s
	for _, url := range []string{s.HealthURL + "/healthz", s.HealthURL + "/readyz"} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || b.String() != "ok" {
			t.Errorf("%s: %d %s", url, resp.StatusCode, b.String())
		}
	}
	metrics, err := s.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`asrl_webhook_admissions_total{kind="Pod",result="mutated"}`,
		`asrl_webhook_admissions_total{kind="SandboxTemplate",result="denied"}`, `asrl_webhook_admission_duration_seconds_bucket{kind="Pod"`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("the metrics lack %s", want)
		}
	}
}

func (w *webhookTest) metricsOnlyForAllowedTokens(t *testing.T) {
	ctx := context.Background()
	ns, s, c := w.ns, w.s, w.c
	if status, err := s.MetricsStatus(ctx, ""); err != nil || status != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d (%v), want 401", status, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-metrics"}}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	req := &authenticationv1.TokenRequest{}
	if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
		t.Fatal(err)
	}
	if status, err := s.MetricsStatus(ctx, req.Status.Token); err != nil || status != http.StatusForbidden {
		t.Errorf("/metrics with a token not allowed them: %d (%v), want 403", status, err)
	}
}

// hasCallCondition reports whether the webhook gave entry w a policy's
// call condition.
func hasCallCondition(w admissionregistrationv1.MutatingWebhook) bool {
	return slices.ContainsFunc(w.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == webhook.CallConditionName })
}

// fromTemplate is a sandbox Pod as made from tmpl.
func fromTemplate(tmpl *extensionsv1beta1.SandboxTemplate, name string) *corev1.Pod {
	pt := tmpl.Spec.PodTemplate
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tmpl.Namespace,
		Labels: map[string]string{policy.SandboxPodLabel: name}, Annotations: pt.ObjectMeta.Annotations}, Spec: *pt.Spec.DeepCopy()}
	for k, v := range pt.ObjectMeta.Labels {
		pod.Labels[k] = v
	}
	return pod
}

// podAdmissions counts the webhook's admissions of Pods, whatever their result.
func podAdmissions(t *testing.T, s *testwebhook.Server) float64 {
	total := 0.0
	for _, result := range []string{"allowed", "mutated", "denied", "errored"} {
		total += admissions(t, s, "Pod", result)
	}
	return total
}

// review wraps a Pod's JSON in an AdmissionReview for its creation.
func review(ns string, pod []byte) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": "0a1b", "operation": "CREATE", "namespace": ns,
			"kind":     map[string]string{"group": "", "version": "v1", "kind": "Pod"},
			"resource": map[string]string{"group": "", "version": "v1", "resource": "pods"},
			"object":   json.RawMessage(pod),
		},
	})
	return string(b)
}

// admissions reads the webhook's count of admissions of kind with result.
func admissions(t *testing.T, s *testwebhook.Server, kind, result string) float64 {
	t.Helper()
	b, err := s.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	series := fmt.Sprintf(`asrl_webhook_admissions_total{kind=%q,result=%q} `, kind, result)
	for _, line := range strings.Split(b, "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
