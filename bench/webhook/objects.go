package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// poolTemplate is a run's template, as the plugin makes them: its run id
// is on it, so the webhook need not look it up on each Pod's owners.
func poolTemplate() *extensionsv1beta1.SandboxTemplate {
	tmpl := &extensionsv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "bench-pool", Labels: labels.ForRun("bench")}}
	tmpl.Spec.PodTemplate.Spec = corev1.PodSpec{SchedulerName: unscheduled,
		Containers: []corev1.Container{{Name: "sandbox", Image: "docker.io/swebench/sweb.eval.x86_64.bench:latest"}}}
	return tmpl
}

// fillPool creates tmpl and a SandboxWarmPool of n replicas of it in ns,
// as any client of Agent Sandbox would, and returns the seconds until the
// controller has created their n Pods; then it deletes them, and the Pods
// with deletePods.
func fillPool(ctx context.Context, kc kubernetes.Interface, c client.Client, ns string, tmpl *extensionsv1beta1.SandboxTemplate, n int) (float64, error) {
	tmpl.Namespace = ns
	replicas := int32(n)
	pool := &extensionsv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "bench-pool", Namespace: ns}}
	pool.Spec.Replicas = &replicas
	pool.Spec.TemplateRef.Name = tmpl.Name
	if err := c.Create(ctx, tmpl); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := c.Create(ctx, pool); err != nil {
		return 0, err
	}
	var secs float64
	for ctx.Err() == nil {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns), client.HasLabels{policy.SandboxPodLabel}); err != nil {
			return 0, err
		}
		if len(pods.Items) >= n {
			secs = time.Since(start).Seconds()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, obj := range []client.Object{pool, tmpl} {
		if err := client.IgnoreNotFound(c.Delete(ctx, obj, background)); err != nil {
			return 0, err
		}
	}
	return secs, deletePods(ctx, kc, c, ns)
}

// setPolicy creates or deletes the benchmark's policy for ns and waits
// until the webhook acts on the change: a dry-run sandbox Pod comes back
// from the mirror, or not.
func setPolicy(ctx context.Context, c client.Client, ns string, on bool) error {
	p := benchPolicy(ns)
	var err error
	if on {
		err = client.IgnoreAlreadyExists(c.Create(ctx, p))
	} else {
		err = client.IgnoreNotFound(c.Delete(ctx, p))
	}
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		pod := probePod(ns)
		if err := c.Create(ctx, pod, client.DryRunAll); err == nil && strings.HasPrefix(pod.Spec.Containers[0].Image, "mirror.example.com/") == on {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctx.Err()
}

// probePod is a sandbox Pod in ns to create as a dry run, to see what
// admission does to it.
func probePod(ns string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: "probe"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "busybox"}}}}
}

// benchPolicy is a policy as an admin would write it: a mirror, allowed
// registries, limit caps, colocation and the security defaults.
func benchPolicy(ns string) *v1alpha1.SandboxPolicy {
	return &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + ns}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		Images: &v1alpha1.ImagePolicy{
			Rewrite:           []v1alpha1.ImageRewrite{{From: "docker.io", To: "mirror.example.com/hub"}},
			AllowedRegistries: []string{"mirror.example.com"},
		},
		MaxLimits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
		// The Pods name a scheduler that does not run (podSpecs).
		Security: &v1alpha1.SecurityPolicy{AllowedSchedulerNames: []string{unscheduled}},
	}}
}

// floorConfiguration matches the sandbox Pods created in ns as the
// webhook's entries match those of a policy, but with a constant false
// condition: the API server prepares every Pod for CEL and never calls
// url.
func floorConfiguration(ns, url string) *admissionregistrationv1.MutatingWebhookConfiguration {
	ignore, none, never := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.NeverReinvocationPolicy
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "bench-webhook-floor-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "floor.bench.sandbox-fleet.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: policy.SandboxPodLabel, Operator: metav1.LabelSelectorOpExists}}},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "false"}},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			ReinvocationPolicy:      &never,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// waitForExclusion waits until the API server's entry name judges, and
// skips, a dry-run sandbox Pod in ns.
func waitForExclusion(ctx context.Context, kc kubernetes.Interface, ns, name string) error {
	for ctx.Err() == nil {
		families, err := apiServerMetrics(ctx, kc)
		if err != nil {
			return err
		}
		for _, m := range families["apiserver_admission_match_condition_exclusions_total"].GetMetric() {
			if label(m, "name") == name && m.GetCounter().GetValue() > 0 {
				return nil
			}
		}
		if _, err := kc.CoreV1().Pods(ns).Create(ctx, probePod(ns), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctx.Err()
}

// unscheduled is the scheduler the benchmark's Pods name, which does not
// run.
const unscheduled = "bench-webhook-unscheduled"

// podSpecs are the Pods each mode creates: a sandbox Pod as a template
// without policy makes it, and for compliant, as one the webhook mutated
// under the bench policy makes it. The Pods name a scheduler that does
// not run: what is measured is their creation, and the scheduler and
// kwok, which share the control plane's CPU, then have the same (no) work
// whatever the webhook did to them.
func podSpecs(ns string) (map[string]*corev1.Pod, error) {
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{policy.TemplateRefHashLabel: "bench"}},
		Spec: corev1.PodSpec{SchedulerName: unscheduled,
			Containers: []corev1.Container{{Name: "sandbox", Image: "docker.io/swebench/sweb.eval.x86_64.bench:latest"}}}}
	mutated := plain.DeepCopy()
	if _, err := policy.Mutate(mutated, policy.Set{*benchPolicy(ns)}, ""); err != nil {
		return nil, err
	}
	return map[string]*corev1.Pod{none: plain, bare: plain, policied: plain, noneCompliant: mutated, floor: mutated, compliant: mutated}, nil
}

// createPods creates n sandbox Pods like spec in ns with workers creators,
// at rate per second (0: as fast as they go), and returns each create's
// latency in seconds and the Pods created per second.
func createPods(ctx context.Context, kc kubernetes.Interface, ns string, spec *corev1.Pod, n, rate, workers int) ([]float64, float64, error) {
	jobs := make(chan int)
	var mu sync.Mutex
	var lat []float64
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				pod := spec.DeepCopy()
				pod.Name, pod.Namespace = fmt.Sprintf("pod-%d", i), ns
				pod.Labels[policy.SandboxPodLabel] = fmt.Sprintf("h%d", i)
				start := time.Now()
				_, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
				d := time.Since(start).Seconds()
				mu.Lock()
				lat = append(lat, d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	var tick <-chan time.Time
	if rate > 0 {
		ticker := time.NewTicker(time.Second / time.Duration(rate))
		defer ticker.Stop()
		tick = ticker.C
	}
	for i := range n {
		if tick != nil {
			<-tick
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return lat, float64(n) / time.Since(start).Seconds(), firstErr
}

// deletePods deletes the Pods in ns and waits until they are gone, so the
// next trial starts from an empty namespace.
func deletePods(ctx context.Context, kc kubernetes.Interface, c client.Client, ns string) error {
	zero := int64(0)
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(zero)); err != nil {
		return err
	}
	for ctx.Err() == nil {
		list, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ctx.Err()
}
