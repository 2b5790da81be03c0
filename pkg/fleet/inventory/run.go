package inventory

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// GroupVersion is the API version of the Run summary, the one of the fleet
// configuration.
var GroupVersion = schema.GroupVersion{Group: "sandbox-fleet.io", Version: "v1alpha1"}

// Run is a run as found on a cluster: a summary computed from its objects,
// not a stored resource. It has an API version and kind so that kubectl's
// printers print it as they print any object. Its name is the run id and
// its creation time that of its oldest object.
type Run struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            RunStatus `json:"status"`
}

// RunStatus counts a run's objects.
type RunStatus struct {
	Templates   int `json:"templates"`
	Pools       int `json:"pools"`
	Claims      int `json:"claims"`
	ReadyClaims int `json:"readyClaims"`
	Pods        int `json:"pods"`
	ReadyPods   int `json:"readyPods"`
	// WarmReplicas is the depth the run's pools are asked to keep.
	WarmReplicas int      `json:"warmReplicas"`
	Images       []string `json:"images,omitempty"`
	Nodes        []string `json:"nodes,omitempty"`
}

// Objects is how many objects of any kind the run has.
func (s RunStatus) Objects() int { return s.Templates + s.Pools + s.Claims + s.Pods }

// RunList is a list of runs.
type RunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Run `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (r *Run) DeepCopyObject() runtime.Object {
	out := *r
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Images = slices.Clone(r.Status.Images)
	out.Status.Nodes = slices.Clone(r.Status.Nodes)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *RunList) DeepCopyObject() runtime.Object {
	out := &RunList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*Run))
	}
	return out
}

// Runs summarizes the inventory per run, sorted by namespace and run id.
func (inv *Inventory) Runs() *RunList {
	type key struct{ namespace, id string }
	runs := map[key]*Run{}
	images := map[key]map[string]bool{}
	nodes := map[key]map[string]bool{}
	get := func(o metav1.Object) *Run {
		k := key{o.GetNamespace(), RunOf(o)}
		r := runs[k]
		if r == nil {
			r = &Run{
				TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "Run"},
				ObjectMeta: metav1.ObjectMeta{Name: k.id, Namespace: k.namespace, Labels: map[string]string{labels.RunID: k.id}},
			}
			runs[k], images[k], nodes[k] = r, map[string]bool{}, map[string]bool{}
		}
		if created := o.GetCreationTimestamp(); r.CreationTimestamp.IsZero() || created.Before(&r.CreationTimestamp) {
			r.CreationTimestamp = created
		}
		return r
	}
	for i := range inv.Templates {
		get(&inv.Templates[i]).Status.Templates++
	}
	for i := range inv.Pools {
		p := &inv.Pools[i]
		r := get(p)
		r.Status.Pools++
		r.Status.WarmReplicas += Depth(p)
		if img := inv.ImageOf(p); img != "" {
			images[key{p.Namespace, RunOf(p)}][img] = true
		}
	}
	for i := range inv.Claims {
		c := &inv.Claims[i]
		r := get(c)
		r.Status.Claims++
		if ClaimReady(c) {
			r.Status.ReadyClaims++
		}
	}
	for i := range inv.Pods {
		p := &inv.Pods[i]
		r := get(p)
		r.Status.Pods++
		if kube.PodReady(p) {
			r.Status.ReadyPods++
		}
		if p.Spec.NodeName != "" {
			nodes[key{p.Namespace, RunOf(p)}][p.Spec.NodeName] = true
		}
	}
	list := &RunList{TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "RunList"}}
	for _, k := range slices.SortedFunc(maps.Keys(runs), func(a, b key) int {
		return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.id, b.id))
	}) {
		r := runs[k]
		r.Status.Images = slices.Sorted(maps.Keys(images[k]))
		r.Status.Nodes = slices.Sorted(maps.Keys(nodes[k]))
		list.Items = append(list.Items, *r)
	}
	return list
}
