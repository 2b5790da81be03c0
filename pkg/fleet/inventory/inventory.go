// Package inventory finds what runs have on a cluster — templates, warm
// pools, claims and the Pods of their sandboxes — by the run-id label every
// run puts on them, and summarizes it per run, pool and claim for the verbs
// that show, describe and reap runs. Nothing without the label is read.
package inventory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Inventory is the objects of runs, as listed from the API server.
type Inventory struct {
	Templates []extensionsv1beta1.SandboxTemplate
	Pools     []extensionsv1beta1.SandboxWarmPool
	Claims    []extensionsv1beta1.SandboxClaim
	Pods      []corev1.Pod
	// Pulls are how far the nodes are with pulling the images of the
	// Pods waiting for them, by Pod, as ReadPulls found.
	Pulls map[types.NamespacedName]nodecache.Pull
}

// List reads the objects of run runID in namespace; an empty namespace
// means every namespace and an empty runID every run.
func List(ctx context.Context, c client.Client, namespace, runID string) (*Inventory, error) {
	selector := client.MatchingLabels{labels.ManagedBy: labels.ManagedByValue}
	if runID != "" {
		selector[labels.RunID] = runID
	}
	opts := []client.ListOption{client.InNamespace(namespace), selector, client.HasLabels{labels.RunID}}
	templates := &extensionsv1beta1.SandboxTemplateList{}
	pools := &extensionsv1beta1.SandboxWarmPoolList{}
	claims := &extensionsv1beta1.SandboxClaimList{}
	pods := &corev1.PodList{}
	// One round trip, not four: the lists go out together.
	var lists errgroup.Group
	for _, l := range []struct {
		kind string
		list client.ObjectList
	}{{"SandboxTemplates", templates}, {"SandboxWarmPools", pools}, {"SandboxClaims", claims}, {"Pods", pods}} {
		lists.Go(func() error {
			if err := c.List(ctx, l.list, opts...); err != nil {
				return fmt.Errorf("listing %s: %w", l.kind, err)
			}
			return nil
		})
	}
	if err := lists.Wait(); err != nil {
		return nil, err
	}
	inv := &Inventory{Templates: templates.Items, Pools: pools.Items, Claims: claims.Items, Pods: pods.Items}
	byKey := func(a, b metav1.Object) int {
		return cmp.Or(strings.Compare(a.GetNamespace(), b.GetNamespace()),
			strings.Compare(a.GetLabels()[labels.RunID], b.GetLabels()[labels.RunID]),
			strings.Compare(a.GetName(), b.GetName()))
	}
	slices.SortFunc(inv.Templates, func(a, b extensionsv1beta1.SandboxTemplate) int { return byKey(&a, &b) })
	slices.SortFunc(inv.Pools, func(a, b extensionsv1beta1.SandboxWarmPool) int { return byKey(&a, &b) })
	slices.SortFunc(inv.Claims, func(a, b extensionsv1beta1.SandboxClaim) int { return byKey(&a, &b) })
	slices.SortFunc(inv.Pods, func(a, b corev1.Pod) int { return byKey(&a, &b) })
	return inv, nil
}

// RunOf is the run an object belongs to.
func RunOf(o metav1.Object) string { return o.GetLabels()[labels.RunID] }

// ClaimReady reports whether c's sandbox is Ready.
func ClaimReady(c *extensionsv1beta1.SandboxClaim) bool {
	return apimeta.IsStatusConditionTrue(c.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
}

// PodOf returns the Pod of claim c's sandbox, nil when it has none yet.
func (inv *Inventory) PodOf(c *extensionsv1beta1.SandboxClaim) *corev1.Pod {
	sandbox := c.Status.SandboxStatus.Name
	if sandbox == "" {
		return nil
	}
	for i := range inv.Pods {
		p := &inv.Pods[i]
		if p.Namespace != c.Namespace {
			continue
		}
		if owner := metav1.GetControllerOf(p); owner != nil && owner.Kind == "Sandbox" && owner.Name == sandbox {
			return p
		}
	}
	return nil
}

// NodeOf is the node of claim c's sandbox, "" while it has none.
func (inv *Inventory) NodeOf(c *extensionsv1beta1.SandboxClaim) string {
	if pod := inv.PodOf(c); pod != nil {
		return pod.Spec.NodeName
	}
	return ""
}

// PodsOf returns the Pods of pool p: its warm sandboxes and those claimed
// from it.
func (inv *Inventory) PodsOf(p *extensionsv1beta1.SandboxWarmPool) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range inv.Pods {
		pod := &inv.Pods[i]
		if pod.Namespace == p.Namespace && pod.Labels[labels.Pool] == p.Name {
			out = append(out, pod)
		}
	}
	return out
}

// ImageOf returns the sandbox image of pool p, from its template.
func (inv *Inventory) ImageOf(p *extensionsv1beta1.SandboxWarmPool) string {
	for _, t := range inv.Templates {
		if t.Namespace == p.Namespace && t.Name == p.Spec.TemplateRef.Name {
			if cs := t.Spec.PodTemplate.Spec.Containers; len(cs) > 0 {
				return cs[0].Image
			}
		}
	}
	return ""
}

// Status says how claim c stands: Ready, the trouble keeping its sandbox
// from being Ready (ImagePullBackOff, Unschedulable, ...), how far its
// node is with pulling its image when ReadPulls found that, or Pending.
func (inv *Inventory) Status(c *extensionsv1beta1.SandboxClaim) string {
	if ClaimReady(c) {
		return "Ready"
	}
	pod := inv.PodOf(c)
	if trouble := claim.Classify(pod); trouble != nil {
		return trouble.Reason
	}
	if pull, ok := inv.PullOf(pod); ok {
		return pull.String()
	}
	return "Pending"
}

// Trouble says what keeps pod from being Ready, when the kubelet or the
// scheduler says (a reason such as ImagePullBackOff or Unschedulable and
// its message); ok is false when nothing does yet.
func Trouble(pod *corev1.Pod) (reason, message string, ok bool) {
	t := claim.Classify(pod)
	if t == nil {
		return "", "", false
	}
	return t.Reason, t.Message, true
}

// Nodes lists the distinct nodes of pods, sorted, with how many of pods
// each holds, e.g. "node-a (3), node-b". Pods not yet scheduled are left
// out.
func Nodes(pods []*corev1.Pod) string {
	count := map[string]int{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			count[p.Spec.NodeName]++
		}
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(count)) {
		if count[n] > 1 {
			parts = append(parts, fmt.Sprintf("%s (%d)", n, count[n]))
		} else {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, ", ")
}

// TaskOf is the id of the task claim c serves.
func TaskOf(c *extensionsv1beta1.SandboxClaim) string { return c.Annotations[labels.TaskID] }

// Depth is the number of sandboxes pool p is asked to keep.
func Depth(p *extensionsv1beta1.SandboxWarmPool) int {
	if p.Spec.Replicas == nil {
		return 0
	}
	return int(*p.Spec.Replicas)
}
