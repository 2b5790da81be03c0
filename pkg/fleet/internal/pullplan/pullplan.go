// Package pullplan decides which nodes run which images' tasks, and in
// what order, so that a sweep of many multi-GB images pulls little and
// early: images that share layers land on the same nodes, each node gets
// as many tasks as its slots' share, its images ordered so that it starts
// on what it holds (or can pull soonest) and pulls the rest while those
// run. It is a pure function of what the nodes hold and the images'
// layers, so it is table-tested and costs nothing to call.
package pullplan

import (
	"cmp"
	"slices"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// Image is an image of the sweep: its layers and how many tasks run it.
type Image struct {
	Ref    string
	Layers []v1alpha1.Layer
	Tasks  int
}

// Node is a node the sweep may run on.
type Node struct {
	Name string
	// Slots is how many of the sweep's sandboxes fit on it at once.
	Slots int
	// Budget is how many bytes it may pull before its image disk reaches
	// the agent's high-water mark; negative is no bound.
	Budget int64
	// Held are the digests of the layers it holds.
	Held map[string]bool
}

// Share is a number of an image's tasks planned on a node.
type Share struct {
	Ref   string
	Tasks int
}

// NodePlan is what a node runs, in order, and pulls for it.
type NodePlan struct {
	Node   string
	Shares []Share
	// Pull is the bytes the node lacks of its images' layers.
	Pull int64
}

// Plan is the sweep's placement.
type Plan struct {
	// Nodes are in the order the nodes were given, each with its shares.
	Nodes []NodePlan
	// Unplanned are the images (or the part of their tasks) no node could
	// take within its slots' share and its disk budget: the scheduler
	// places them as it would without a plan.
	Unplanned []Share
}

// PullBytes is the bytes the plan has the nodes pull.
func (p Plan) PullBytes() int64 {
	var sum int64
	for _, n := range p.Nodes {
		sum += n.Pull
	}
	return sum
}

// New plans images on nodes. Each node takes at most its share of the
// tasks (the tasks times its slots over all the slots, rounded up). Step
// by step, the planner gives the image and node whose layers the node
// lacks least of (given what it holds and what the plan has it pull so
// far) as many of the image's tasks as the node has room for: held
// images go first, then the images that share an environment with them,
// and a node that pulled a repository's environment takes its other
// instances before another node pulls the environment again. Ties go to
// the image with more tasks, then the node with more room, then names.
func New(images []Image, nodes []Node) Plan {
	p := Plan{Nodes: make([]NodePlan, len(nodes))}
	total, slots := 0, 0
	for _, img := range images {
		total += img.Tasks
	}
	for _, n := range nodes {
		slots += n.Slots
	}
	room := make([]int, len(nodes))
	budget := make([]int64, len(nodes))
	holds := make([]map[string]bool, len(nodes))
	for i, n := range nodes {
		p.Nodes[i].Node = n.Name
		if slots > 0 {
			room[i] = (total*n.Slots + slots - 1) / slots
		}
		budget[i] = n.Budget
		holds[i] = map[string]bool{}
		for d := range n.Held {
			holds[i][d] = true
		}
	}
	left := make([]int, len(images))
	for i, img := range images {
		left[i] = img.Tasks
	}
	lacks := func(img, node int) int64 {
		var sum int64
		for _, l := range images[img].Layers {
			if !holds[node][l.Digest] {
				sum += l.Size
			}
		}
		return sum
	}
	// cost[i][n] is what node n lacks of image i; best[i] the node image
	// i would go to. A step changes one node, so only that node's column
	// is recomputed, and only the images whose best it was are looked at
	// anew: the plan of thousands of images on hundreds of nodes takes
	// well under a second.
	cost := make([][]int64, len(images))
	best := make([]int, len(images))
	fits := func(i, n int) bool { return room[n] > 0 && (budget[n] < 0 || cost[i][n] <= budget[n]) }
	beats := func(i, n, m int) bool {
		return m < 0 || better(cost[i][n], cost[i][m], left[i], left[i], room[n], room[m])
	}
	rescan := func(i int) {
		best[i] = -1
		for n := range nodes {
			if fits(i, n) && beats(i, n, best[i]) {
				best[i] = n
			}
		}
	}
	for i := range images {
		cost[i] = make([]int64, len(nodes))
		for n := range nodes {
			cost[i][n] = lacks(i, n)
		}
		rescan(i)
	}
	for {
		pick := -1
		for i := range images {
			if left[i] == 0 || best[i] < 0 {
				continue
			}
			if pick < 0 || better(cost[i][best[i]], cost[pick][best[pick]], left[i], left[pick], room[best[i]], room[best[pick]]) {
				pick = i
			}
		}
		if pick < 0 {
			break
		}
		node, paid := best[pick], cost[pick][best[pick]]
		take := min(left[pick], room[node])
		left[pick] -= take
		room[node] -= take
		if budget[node] >= 0 {
			budget[node] -= paid
		}
		for _, l := range images[pick].Layers {
			holds[node][l.Digest] = true
		}
		np := &p.Nodes[node]
		np.Shares = append(np.Shares, Share{Ref: images[pick].Ref, Tasks: take})
		np.Pull += paid
		for i := range images {
			if left[i] == 0 {
				continue
			}
			cost[i][node] = lacks(i, node)
			switch {
			case best[i] == node || best[i] < 0:
				rescan(i)
			case fits(i, node) && beats(i, node, best[i]):
				best[i] = node
			}
		}
	}
	for i, img := range images {
		if left[i] > 0 {
			p.Unplanned = append(p.Unplanned, Share{Ref: img.Ref, Tasks: left[i]})
		}
	}
	return p
}

// better says whether an image and node of cost, tasks left and room
// beats the best so far. Images and nodes are visited in the order given,
// so an exact tie keeps the earlier: the plan is deterministic.
func better(cost, bestCost int64, tasks, bestTasks, room, bestRoom int) bool {
	return cmp.Or(cmp.Compare(cost, bestCost), -cmp.Compare(tasks, bestTasks), -cmp.Compare(room, bestRoom)) < 0
}

// Images lists the refs of a node's shares, in order, once each.
func (n NodePlan) Images() []string {
	var refs []string
	for _, s := range n.Shares {
		if !slices.Contains(refs, s.Ref) {
			refs = append(refs, s.Ref)
		}
	}
	return refs
}
