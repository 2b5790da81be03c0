package fleet

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/pullplan"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

func resourceList(cpu, memory, pods string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory, corev1.ResourcePods: pods} {
		if v != "" {
			l[name] = resource.MustParse(v)
		}
	}
	return l
}

func TestSlots(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		allocatable, request corev1.ResourceList
		want                 int
	}{
		{"CPU bounds", resourceList("4", "64Gi", "110"), resourceList("1", "64Mi", ""), 4},
		{"memory bounds", resourceList("16", "2Gi", "110"), resourceList("250m", "512Mi", ""), 4},
		{"millicores count", resourceList("3500m", "64Gi", "110"), resourceList("250m", "", ""), 14},
		{"the Pod count bounds", resourceList("64", "64Gi", "3"), resourceList("1", "", ""), 3},
		{"no requests: the Pod count", resourceList("4", "8Gi", "110"), corev1.ResourceList{}, 110},
		{"a resource the node lacks is not counted", resourceList("4", "8Gi", "110"), corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("2")}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slots(tc.allocatable, tc.request); got != tc.want {
				t.Errorf("slots = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPullNodes(t *testing.T) {
	node := func(name, hostname string, unschedulable bool) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Spec: corev1.NodeSpec{Unschedulable: unschedulable},
			Status: corev1.NodeStatus{Allocatable: resourceList("4", "16Gi", "110")}}
		if hostname != "" {
			n.Labels[corev1.LabelHostname] = hostname
		}
		return n
	}
	// used is all that fills the filesystem, of which the images are a
	// tenth: the plan's budget is what the agent will pull.
	cache := func(capacity, used int64, digests ...string) nodeHolds {
		c := &v1alpha1.NodeImageCache{ImageFilesystem: v1alpha1.ImageFilesystem{CapacityBytes: capacity, AvailableBytes: capacity - used, UsedBytes: used / 10}}
		for _, d := range digests {
			c.Layers = append(c.Layers, v1alpha1.Layer{Digest: d, Size: 1})
		}
		return holdsOf(c)
	}
	nodes := []corev1.Node{node("a", "host-a", false), node("b", "host-b", false), node("c", "host-c", false),
		node("d", "", false), node("e", "host-e", true)}
	caches := map[string]nodeHolds{"a": cache(1000, 300, "x", "y"), "b": cache(0, 0), "d": cache(1000, 0), "e": cache(1000, 0)}
	got, hostnames := pullNodes(nodes, caches, resourceList("1", "1Gi", ""), 80)
	want := []pullplan.Node{
		{Name: "a", Slots: 4, Budget: 800 - 300, Held: map[string]bool{"x": true, "y": true}},
		{Name: "b", Slots: 4, Budget: -1, Held: map[string]bool{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pullNodes:\n got %+v\nwant %+v (c has no agent, d no hostname label, e is cordoned)", got, want)
	}
	if want := map[string]string{"a": "host-a", "b": "host-b"}; !reflect.DeepEqual(hostnames, want) {
		t.Errorf("hostnames %v, want %v", hostnames, want)
	}
}

// The plan as the passes use it: each node with its slots and shares
// (nodes with none left out), the nodes each image runs on, and the
// pools made every node's first image first.
func TestPlannedOf(t *testing.T) {
	plan := pullplan.Plan{Nodes: []pullplan.NodePlan{
		{Node: "a", Shares: []pullplan.Share{{Ref: "a1", Tasks: 2}, {Ref: "a2", Tasks: 2}, {Ref: "both", Tasks: 1}}},
		{Node: "idle"},
		{Node: "b", Shares: []pullplan.Share{{Ref: "both", Tasks: 3}, {Ref: "b2", Tasks: 1}}},
	}, Unplanned: []pullplan.Share{{Ref: "left", Tasks: 1}}}
	nodes := []pullplan.Node{{Name: "a", Slots: 2}, {Name: "idle", Slots: 4}, {Name: "b", Slots: 3}}
	p := plannedOf(plan, nodes, map[string]string{"a": "host-a", "b": "host-b", "idle": "host-idle"})
	want := plannedPulls{
		nodes: []plannedNode{{name: "a", hostname: "host-a", slots: 2, shares: plan.Nodes[0].Shares}, {name: "b", hostname: "host-b", slots: 3, shares: plan.Nodes[2].Shares}},
		on:    map[string][]string{"a1": {"host-a"}, "a2": {"host-a"}, "both": {"host-a", "host-b"}, "b2": {"host-b"}},
		order: []string{"a1", "both", "a2", "b2"},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("plannedOf:\n got %+v\nwant %+v", p, want)
	}
}

// Each node's queue takes its shares' tasks in the pass's order; what no
// share takes is left, in order.
func TestQueues(t *testing.T) {
	p := plannedPulls{nodes: []plannedNode{
		{shares: []pullplan.Share{{Ref: "x", Tasks: 2}, {Ref: "y", Tasks: 1}}},
		{shares: []pullplan.Share{{Ref: "x", Tasks: 2}, {Ref: "z", Tasks: 3}}},
	}}
	var ts []tasks.Task
	for i, img := range []string{"y", "x", "w", "x", "y", "x", "z", "x", "x", "y"} {
		ts = append(ts, tasks.Task{ID: strconv.Itoa(i), Image: img})
	}
	queues, left := p.queues(ts)
	ids := func(ts []tasks.Task) string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Image+t.ID)
		}
		return strings.Join(out, " ")
	}
	got := []string{ids(queues[0]), ids(queues[1]), ids(left)}
	// z has one task of the three planned (a resumed run did the rest);
	// x has one more than planned, y two, w none planned.
	want := []string{"x1 x3 y0", "x5 x7 z6", "w2 y4 x8 y9"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("queues and left %q, want %q", got, want)
	}
}

func TestPullJobs(t *testing.T) {
	plan := pullplan.Plan{Nodes: []pullplan.NodePlan{
		{Node: "a", Shares: []pullplan.Share{{Ref: "i1", Tasks: 2}, {Ref: "i2", Tasks: 2}, {Ref: "i1", Tasks: 1}}},
		{Node: "idle"},
	}}
	jobs := pullJobs(plan, map[string]string{"a": "host-a", "idle": "host-idle"}, "run-1", plannedPulls{namespace: "ns", highWater: 70})
	if len(jobs) != 1 {
		t.Fatalf("%d jobs, want one: a node with nothing to run pulls nothing", len(jobs))
	}
	j := jobs[0]
	want := v1alpha1.PrepullJobSpec{Images: []string{"i1", "i2"}, NodeSelector: map[string]string{corev1.LabelHostname: "host-a"},
		PerNodeParallelism: 1, DiskHighWaterPercent: 70}
	if !reflect.DeepEqual(j.Spec, want) || j.Namespace != "ns" || j.GenerateName != "run-1-pulls-" || !reflect.DeepEqual(j.Labels, labels.ForRun("run-1")) {
		t.Errorf("job %+v %+v, want spec %+v in ns, labelled with the run", j.ObjectMeta, j.Spec, want)
	}
}
