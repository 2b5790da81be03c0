package pullplan

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// The layers' sizes, in GiB-like units: a shared base, an environment per
// repository, an instance layer per image.
const base, env, inst = 30, 20, 3

// img is the image of instance i of repository repo with tasks tasks.
func img(repo, i, tasks int) Image {
	return Image{Ref: fmt.Sprintf("r%d:i%d", repo, i), Tasks: tasks, Layers: []v1alpha1.Layer{
		{Digest: "base", Size: base},
		{Digest: fmt.Sprintf("env%d", repo), Size: env},
		{Digest: fmt.Sprintf("r%d:i%d", repo, i), Size: inst},
	}}
}

// node is a node of slots slots, no disk bound, holding the layers of
// images.
func node(name string, slots int, images ...Image) Node {
	held := map[string]bool{}
	for _, img := range images {
		for _, l := range img.Layers {
			held[l.Digest] = true
		}
	}
	return Node{Name: name, Slots: slots, Budget: -1, Held: held}
}

func TestNew(t *testing.T) {
	withBase := func(n Node) Node { n.Held["base"] = true; return n }
	budget := func(n Node, b int64) Node { n.Budget = b; return n }
	for _, tc := range []struct {
		name   string
		images []Image
		nodes  []Node
		want   Plan
	}{{
		name:   "a node runs what it holds, pulling nothing",
		images: []Image{img(0, 0, 2), img(1, 0, 2)},
		nodes:  []Node{node("a", 2, img(1, 0, 0)), node("b", 2, img(0, 0, 0))},
		want: Plan{Nodes: []NodePlan{
			{Node: "a", Shares: []Share{{"r1:i0", 2}}},
			{Node: "b", Shares: []Share{{"r0:i0", 2}}},
		}},
	}, {
		name:   "a repository's instances go where its environment is",
		images: []Image{img(0, 0, 1), img(1, 0, 1), img(0, 1, 1), img(1, 1, 1)},
		nodes:  []Node{withBase(node("a", 2)), withBase(node("b", 2))},
		want: Plan{Nodes: []NodePlan{
			{Node: "a", Shares: []Share{{"r0:i0", 1}, {"r0:i1", 1}}, Pull: env + 2*inst},
			{Node: "b", Shares: []Share{{"r1:i0", 1}, {"r1:i1", 1}}, Pull: env + 2*inst},
		}},
	}, {
		name:   "an environment a node holds draws its repository's images",
		images: []Image{img(0, 0, 1), img(0, 1, 1), img(1, 0, 1), img(1, 1, 1)},
		nodes:  []Node{node("a", 2, img(1, 5, 0)), node("b", 2, img(0, 5, 0))},
		want: Plan{Nodes: []NodePlan{
			{Node: "a", Shares: []Share{{"r1:i0", 1}, {"r1:i1", 1}}, Pull: 2 * inst},
			{Node: "b", Shares: []Share{{"r0:i0", 1}, {"r0:i1", 1}}, Pull: 2 * inst},
		}},
	}, {
		name:   "an image with more tasks than a node's share is split",
		images: []Image{img(0, 0, 6)},
		nodes:  []Node{node("a", 2, img(0, 0, 0)), node("b", 1)},
		want: Plan{Nodes: []NodePlan{
			{Node: "a", Shares: []Share{{"r0:i0", 4}}},
			{Node: "b", Shares: []Share{{"r0:i0", 2}}, Pull: base + env + inst},
		}},
	}, {
		name:   "shares follow the slots",
		images: []Image{img(0, 0, 3), img(0, 1, 1)},
		nodes:  []Node{node("a", 1, img(0, 1, 0)), node("b", 3, img(0, 0, 0))},
		want: Plan{Nodes: []NodePlan{
			{Node: "a", Shares: []Share{{"r0:i1", 1}}},
			{Node: "b", Shares: []Share{{"r0:i0", 3}}},
		}},
	}, {
		name:   "a node pulls no more than its disk budget",
		images: []Image{img(0, 0, 1), img(1, 0, 1)},
		nodes:  []Node{budget(withBase(node("a", 1)), env+inst), budget(withBase(node("b", 1)), env+inst)},
		want: Plan{Nodes: []NodePlan{
			{Node: "a", Shares: []Share{{"r0:i0", 1}}, Pull: env + inst},
			{Node: "b", Shares: []Share{{"r1:i0", 1}}, Pull: env + inst},
		}},
	}, {
		name:   "an image no node has the disk for is left to the scheduler",
		images: []Image{img(0, 0, 1), img(1, 0, 1)},
		nodes:  []Node{budget(node("a", 2), base+env+inst+env)},
		want: Plan{
			Nodes:     []NodePlan{{Node: "a", Shares: []Share{{"r0:i0", 1}}, Pull: base + env + inst}},
			Unplanned: []Share{{"r1:i0", 1}},
		},
	}, {
		name:   "no nodes: nothing is planned",
		images: []Image{img(0, 0, 2)},
		want:   Plan{Nodes: []NodePlan{}, Unplanned: []Share{{"r0:i0", 2}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := New(tc.images, tc.nodes)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("New:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// The sweep, in small: 5 repositories × 10 instances × 4
// rollouts on 13 nodes of 4 slots holding the base. Each repository's 40
// tasks fill two and a half nodes, so each node pulls at most two
// environments, and the plan pulls far less than every image on a node of
// its own would.
func TestNewGroupsRepositories(t *testing.T) {
	var images []Image
	for i := range 10 {
		for repo := range 5 {
			images = append(images, img(repo, i, 4))
		}
	}
	var nodes []Node
	for i := range 13 {
		n := node(fmt.Sprint("n", i), 4)
		n.Held["base"] = true
		nodes = append(nodes, n)
	}
	p := New(images, nodes)
	if len(p.Unplanned) > 0 {
		t.Fatalf("unplanned: %v", p.Unplanned)
	}
	for _, n := range p.Nodes {
		envs := map[string]bool{}
		tasks := 0
		for _, s := range n.Shares {
			envs[s.Ref[:2]] = true
			tasks += s.Tasks
		}
		if len(envs) > 2 || tasks > 16 {
			t.Errorf("node %s runs %d tasks of %d repositories: %v", n.Node, tasks, len(envs), n.Shares)
		}
	}
	// Every instance layer once, an environment per node that runs its
	// repository: 5 repositories over 13 nodes is at most 5+13-1.
	if most := int64(50*inst + (5+13-1)*env); p.PullBytes() > most {
		t.Errorf("the plan pulls %d, more than %d", p.PullBytes(), most)
	}
}

func BenchmarkNew(b *testing.B) {
	var images []Image
	for repo := range 100 {
		for i := range 25 {
			images = append(images, img(repo, i, 4))
		}
	}
	var nodes []Node
	for i := range 200 {
		nodes = append(nodes, node(fmt.Sprint("n", i), 16, img(i%100, i%25, 0)))
	}
	for b.Loop() {
		New(images, nodes)
	}
}
