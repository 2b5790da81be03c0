package webhook_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// A cluster admin's policy, applied to a sandbox Pod as asrl-webhook
// applies it at admission: the image goes to the mirror, the run id is
// labelled, the security defaults are set and the limits capped; a Pod
// asking for more than the cap is refused, saying why.
func ExampleMutate() {
	policies := []v1alpha1.SandboxPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "baseline"},
		Spec: v1alpha1.SandboxPolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "rl"}},
			Images: &v1alpha1.ImagePolicy{
				Rewrite:           []v1alpha1.ImageRewrite{{From: "docker.io", To: "mirror.example.com/hub"}},
				AllowedRegistries: []string{"mirror.example.com"},
			},
			Security:  &v1alpha1.SecurityPolicy{},
			MaxLimits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Gi")},
		},
	}}
	set, err := webhook.Select(policies, map[string]string{"team": "rl"})
	if err != nil {
		panic(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "s-7f3a", Namespace: "rl", Labels: map[string]string{webhook.SandboxPodLabel: "7f3a"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "sandbox",
			Image: "docker.io/swebench/sweb.eval.x86_64.django__django-11099:latest",
		}}},
	}
	changes, err := webhook.Mutate(pod, set, "run-1")
	if err != nil {
		panic(err)
	}
	for _, c := range changes {
		fmt.Println(c)
	}
	c := pod.Spec.Containers[0]
	fmt.Println(c.Image)
	fmt.Println(c.Resources.Limits.Memory(), *c.SecurityContext.AllowPrivilegeEscalation)

	greedy := pod.DeepCopy()
	greedy.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("64Gi")
	_, err = webhook.Mutate(greedy, set, "run-1")
	fmt.Println(err)
	// Output:
	// spec.containers[0].image docker.io/swebench/sweb.eval.x86_64.django__django-11099:latest → mirror.example.com/hub/swebench/sweb.eval.x86_64.django__django-11099:latest
	// spec.automountServiceAccountToken false
	// spec.securityContext.seccompProfile RuntimeDefault
	// spec.containers[0].securityContext.allowPrivilegeEscalation false
	// spec.containers[0].securityContext.capabilities.drop ALL
	// spec.containers[0].resources.limits.memory 32Gi
	// metadata.labels sandbox-fleet.io/run-id=run-1
	// mirror.example.com/hub/swebench/sweb.eval.x86_64.django__django-11099:latest
	// 32Gi false
	// denied by SandboxPolicy "baseline": spec.containers[0].resources.limits.memory: 64Gi is above the cap of 32Gi (spec.maxLimits)
}
