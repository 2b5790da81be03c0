package webhook_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// TestSideDoors: what a namespace's editor can do to a sandbox Pod after
// its admission, or put in a template or Secret, is governed by the
// webhook as shipped — an image patched in, a resize past the caps, a
// toleration of the control plane added, the
// sandbox label taken off or put on a Pod made without it, a Pod made
// without it that the policy's otherPodSelector does not select, the
// adoptable label on a Pod as made or added, then a
// sysadmin debug container, a projected
// token, a service account token Secret — each denied naming its field
// while the same operations on compliant values pass; and with the
// webhook stopped each is refused (fail closed) while the compliant ones
// still pass where they need nothing from it.
func TestSideDoors(t *testing.T) {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	s, clients := startWebhook(t, ns)
	c := clients.Client
	pol := &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "side-doors-" + ns}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		Images: &v1alpha1.ImagePolicy{
			Rewrite:           []v1alpha1.ImageRewrite{{From: "docker.io", To: "mirror.example.com/hub"}},
			AllowedRegistries: []string{"mirror.example.com"},
		},
		MaxLimits:        corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
		OtherPodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "trainer"}},
	}}
	if err := c.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pol) })
	if err := s.WaitForPolicySet(ctx, ns, true); err != nil {
		t.Fatal(err)
	}

	// The Pods stay pending: the API server resizes a running Pod only on
	// a node reporting its containers' resources, which the fake nodes do
	// not.
	newPod := func(name string) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: name}},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"sandbox-fleet.io/test-node": "none"}, Containers: []corev1.Container{{Name: "sandbox", Image: "busybox:1.36", Command: []string{"sleep", "infinity"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if got := pod.Spec.Containers[0].Image; got != "mirror.example.com/hub/library/busybox:1.36" {
			t.Fatalf("the sandbox Pod was admitted with image %s, not the mirror's", got)
		}
		return pod
	}
	patch := func(name, subresource, body string) error {
		p := client.RawPatch(types.JSONPatchType, []byte(body))
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if subresource != "" {
			return c.SubResource(subresource).Patch(ctx, pod, p)
		}
		return c.Patch(ctx, pod, p)
	}
	kubectlBin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	debug := func(name, profile string) error {
		out, err := exec.CommandContext(ctx, filepath.Join(kubectlBin, "kubectl"), "--kubeconfig", cluster.Kubeconfig(), "-n", ns,
			"debug", name, "--image=mirror.example.com/hub/library/busybox:1.36", "--profile="+profile, "--container=debug-"+profile).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	tokenTemplate := func(name string) error {
		return c.Create(ctx, sandboxTemplate(ns, name, func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		}))
	}

	secret := func(name string, typ corev1.SecretType) error {
		meta := metav1.ObjectMeta{Name: name, Namespace: ns}
		if typ == corev1.SecretTypeServiceAccountToken {
			meta.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
		}
		return c.Create(ctx, &corev1.Secret{ObjectMeta: meta, Type: typ})
	}

	// otherPod is a Pod that is no sandbox, labelled podLabels: root, with
	// the namespace's token, as Pods are unless they say otherwise.
	otherPod := func(name string, podLabels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: podLabels},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"sandbox-fleet.io/test-node": "none"}, AutomountServiceAccountToken: ptr.To(true),
				SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(0))},
				Containers:      []corev1.Container{{Name: "sandbox", Image: "mirror.example.com/hub/library/busybox:1.36"}}}}
	}

	// Each door: the operation on a Pod (and its field in the denial), or
	// a template's or Secret's creation.
	doors := []struct {
		name, field string
		try         func(pod string) error
	}{
		{"an image patched in", "spec.containers[0].image: image evil.example/x:1 is not from an allowed registry", func(pod string) error {
			return patch(pod, "", `[{"op":"replace","path":"/spec/containers/0/image","value":"evil.example/x:1"}]`)
		}},
		{"a resize past the cap", "spec.containers[0].resources.limits.memory: 16Gi is above the cap of 8Gi", func(pod string) error {
			return patch(pod, "resize", `[{"op":"replace","path":"/spec/containers/0/resources/limits/memory","value":"16Gi"}]`)
		}},
		{"a toleration of the control plane added", "spec.tolerations[", func(pod string) error {
			return patch(pod, "", `[{"op":"add","path":"/spec/tolerations/-","value":{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}}]`)
		}},
		{"the sandbox label taken off", "metadata.labels[" + policy.SandboxPodLabel + "]", func(pod string) error {
			return patch(pod, "", `[{"op":"remove","path":"/metadata/labels/agents.x-k8s.io~1sandbox-name-hash"}]`)
		}},
		{"the sandbox label put on a Pod made without it", "spec.automountServiceAccountToken: a Pod becomes a sandbox Pod", func(pod string) error {
			plain := otherPod(pod+"-plain", map[string]string{"app": "trainer"})
			if err := c.Create(ctx, plain); err != nil {
				return err
			}
			return patch(plain.Name, "", `[{"op":"add","path":"/metadata/labels/agents.x-k8s.io~1sandbox-name-hash","value":"plain"}]`)
		}},
		{"a root Pod with a token made without the sandbox label", "metadata.labels: the Pod is no sandbox Pod", func(pod string) error {
			return c.Create(ctx, otherPod(pod+"-unlabelled", nil))
		}},
		{"a Pod made adoptable", `metadata.labels["agents.x-k8s.io/adoptable"]`, func(pod string) error {
			return c.Create(ctx, otherPod(pod+"-adoptable", map[string]string{"app": "trainer", policy.AdoptableLabel: "true"}))
		}},
		{"the adoptable label put on a Pod", `metadata.labels["agents.x-k8s.io/adoptable"]`, func(pod string) error {
			plain := otherPod(pod+"-later-adoptable", map[string]string{"app": "trainer"})
			if err := c.Create(ctx, plain); err != nil {
				return err
			}
			return patch(plain.Name, "", `[{"op":"add","path":"/metadata/labels/agents.x-k8s.io~1adoptable","value":"true"}]`)
		}},
		{"a sysadmin debug container", "spec.ephemeralContainers[0].securityContext.privileged: privileged containers are not allowed", func(pod string) error {
			return debug(pod, "sysadmin")
		}},
		{"a template projecting a token", "spec.podTemplate.spec.volumes[0].projected.sources[0].serviceAccountToken", func(pod string) error {
			return tokenTemplate(pod + "-token")
		}},
		{"a Secret the token controller fills with the default account's token", "type: a kubernetes.io/service-account-token Secret", func(pod string) error {
			return secret(pod+"-token", corev1.SecretTypeServiceAccountToken)
		}},
	}
	// The same operations on compliant values.
	compliant := []struct {
		name string
		try  func(pod string) error
		// needsWebhook is whether the API server must call the webhook
		// for it, so it is refused too with the webhook down.
		needsWebhook bool
	}{
		{"an image from the mirror", func(pod string) error {
			return patch(pod, "", `[{"op":"replace","path":"/spec/containers/0/image","value":"mirror.example.com/hub/library/busybox:1.37"}]`)
		}, false},
		{"an image the mirror serves, rewritten", func(pod string) error {
			if err := patch(pod, "", `[{"op":"replace","path":"/spec/containers/0/image","value":"busybox:1.37"}]`); err != nil {
				return err
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod}, got); err != nil {
				return err
			}
			if image := got.Spec.Containers[0].Image; image != "mirror.example.com/hub/library/busybox:1.37" {
				return fmt.Errorf("the patched image is %s, not the mirror's", image)
			}
			return nil
		}, true},
		{"a resize within the cap", func(pod string) error {
			return patch(pod, "resize", `[{"op":"replace","path":"/spec/containers/0/resources/limits/memory","value":"4Gi"}]`)
		}, false},
		{"another label", func(pod string) error {
			return patch(pod, "", `[{"op":"add","path":"/metadata/labels/owner","value":"me"}]`)
		}, false},
		{"a restricted debug container", func(pod string) error { return debug(pod, "restricted") }, false},
		{"an opaque Secret", func(pod string) error { return secret(pod+"-opaque", corev1.SecretTypeOpaque) }, false},
		{"a Pod the policy's otherPodSelector selects", func(pod string) error {
			return c.Create(ctx, otherPod(pod+"-trainer", map[string]string{"app": "trainer"}))
		}, false},
	}

	check := func(t *testing.T, pod string, down bool) {
		for _, d := range doors {
			err := d.try(pod)
			want := d.field
			if down {
				want = "failed calling webhook"
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want refused saying %q", d.name, err, want)
			}
		}
		for _, o := range compliant {
			err := o.try(pod)
			switch {
			case down && o.needsWebhook:
				if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
					t.Errorf("%s with the webhook down: %v, want refused", o.name, err)
				}
			case err != nil:
				t.Errorf("%s: %v", o.name, err)
			}
		}
	}
	t.Run("up", func(t *testing.T) { check(t, newPod("up").Name, false) })
	t.Run("down", func(t *testing.T) {
		pod := newPod("down")
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		// The API server may still hold a connection to the stopped
		// server a moment.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			err := patch(pod.Name, "", `[{"op":"replace","path":"/spec/containers/0/image","value":"evil.example/x:1"}]`)
			return err != nil && strings.Contains(err.Error(), "failed calling webhook"), nil
		}); err != nil {
			t.Fatalf("the API server still reaches the stopped webhook: %v", err)
		}
		check(t, pod.Name, true)
	})
}
