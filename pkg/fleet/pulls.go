package fleet

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/pullplan"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
)

// plannedPulls is what a run's pull plan decided: the nodes, each with
// its own queue of work, and the nodes (their hostname labels) each image
// runs on.
type plannedPulls struct {
	nodes []plannedNode
	on    map[string][]string
	// order is the order the images' pools are made in: every node's
	// first image, then every node's second, and so on.
	order []string
	// namespace and highWater are those of the nodes' PrepullJobs.
	namespace string
	highWater int32
}

// plannedNode is a node of the plan (its name and hostname label) and
// what it runs, in order.
type plannedNode struct {
	name, hostname string
	slots          int
	shares         []pullplan.Share
}

// plansPulls says whether the run plans its pulls (config.Fleet's
// PlannedPulls): a run, not a session, of a disk-sized windowed strategy
// that does not pre-pull everything.
func (f *Fleet) plansPulls() bool {
	return *f.cfg.PlannedPulls && f.cfg.Warming().Windows == config.DiskSized && !f.driving.session && !f.driving.prepull
}

// planPulls plans the run's pulls on its cluster from what the nodes'
// agents say they hold, has each planned node's agent pull its images in
// the order the node runs them (a PrepullJob per node, not waited for:
// the first tasks start at once, their Pods waiting for pulls already
// under way), and records the plan for the passes (runQueues) and the
// pools. Whatever keeps it from planning — several clusters, no agents,
// no right to read the nodes — is said once and the run goes on as
// without a plan.
func (f *Fleet) planPulls(ctx context.Context) {
	start := time.Now()
	defer func() { f.phase("plan-pulls", "", time.Since(start)) }()
	if len(f.clusters) > 1 {
		f.log.Info("Planned pulls: a run over several clusters is placed without a pull plan", "clusters", len(f.clusters))
		return
	}
	c := f.clusters[0]
	nodes := &corev1.NodeList{}
	if err := c.Clients.Client.List(ctx, nodes, client.MatchingLabels(c.spec.NodeSelector)); err != nil {
		f.log.Error(err, "Planned pulls: reading the nodes failed; the run goes on without a pull plan", "cluster", c.Name)
		return
	}
	caches := map[string]nodeHolds{}
	index := nodecache.NewIndex()
	err := informer.EachCache(ctx, c.Clients.Client, func(nic *v1alpha1.NodeImageCache) error {
		if n, err := nodecache.NewNode(nic); err == nil {
			caches[nic.Name] = holdsOf(nic)
			index.Set(n)
		}
		return nil
	})
	if err != nil {
		f.log.Error(err, "Planned pulls: reading the nodes' image caches failed; the run goes on without a pull plan", "cluster", c.Name)
		return
	}
	highWater := cmp.Or(f.driving.highWater, nodecache.DefaultHighWaterPercent)
	planNodes, hostnames := pullNodes(nodes.Items, caches, f.cfg.Template.Resources.Requests, highWater)
	if len(planNodes) == 0 {
		f.log.Info("Planned pulls: no node the run may use runs asrl-prepull-agent; the scheduler places the pools and they pull as they land",
			"cluster", c.Name, "nodes", len(nodes.Items))
		return
	}
	layers := f.poolLayers(ctx, func(ref string) []v1alpha1.Layer {
		l, _ := index.Layers(ref)
		return l
	})
	plan := pullplan.New(pullImages(f.plan.Pools, layers), planNodes)
	planned := plannedOf(plan, planNodes, hostnames)
	planned.namespace, planned.highWater = c.Namespace(), highWater
	f.mu.Lock()
	f.pulls = &planned
	f.mu.Unlock()
	jobs := pullJobs(plan, hostnames, f.runID, planned)
	f.log.Info("Planned pulls", "cluster", c.Name, "nodes", len(jobs), "images", len(planned.order),
		"unplanned", len(plan.Unplanned), "pullGiB", fmt.Sprintf("%.1f", float64(plan.PullBytes())/(1<<30)))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, job := range jobs {
		g.Go(func() error { return c.Clients.Client.Create(gctx, job) })
	}
	if err := g.Wait(); err != nil {
		f.log.Error(err, "Planned pulls: creating the nodes' PrepullJobs failed (creating them needs an admin's grant: docs/admin.md); the sandboxes still start on their planned nodes and pull there as they start", "cluster", c.Name)
	}
}

// nodeHolds is what the plan reads of a node's NodeImageCache — the
// digests of the layers it holds, its image filesystem — so that a plan
// over thousands of nodes does not keep their caches (up to a MiB each).
type nodeHolds struct {
	held map[string]bool
	fs   v1alpha1.ImageFilesystem
}

func holdsOf(nic *v1alpha1.NodeImageCache) nodeHolds {
	held := make(map[string]bool, len(nic.Layers))
	for _, l := range nic.Layers {
		held[l.Digest] = true
	}
	return nodeHolds{held: held, fs: nic.ImageFilesystem}
}

// pullNodes are the nodes the plan may use — schedulable, with a
// hostname label to select them by and an agent's cache — each with as
// many slots as its allocatable resources hold Pods of request, and the
// bytes it may pull before its image filesystem is highWater percent
// full; and each one's hostname label.
func pullNodes(nodes []corev1.Node, caches map[string]nodeHolds, request corev1.ResourceList, highWater int32) ([]pullplan.Node, map[string]string) {
	var out []pullplan.Node
	hostnames := map[string]string{}
	for _, n := range nodes {
		cache, ok := caches[n.Name]
		hostname := n.Labels[corev1.LabelHostname]
		if !ok || hostname == "" || n.Spec.Unschedulable {
			continue
		}
		budget := int64(-1)
		if fs := cache.fs; fs.CapacityBytes > 0 {
			budget = max(0, nodecache.Room(fs, highWater))
		}
		hostnames[n.Name] = hostname
		out = append(out, pullplan.Node{Name: n.Name, Slots: slots(n.Status.Allocatable, request), Budget: budget, Held: cache.held})
	}
	return out, hostnames
}

// slots is how many Pods requesting request fit in allocatable, by each
// resource requested and by the node's Pod count.
func slots(allocatable, request corev1.ResourceList) int {
	n := allocatable.Pods().Value()
	for name, want := range request {
		have, ok := allocatable[name]
		if want.IsZero() || !ok {
			continue
		}
		n = min(n, have.MilliValue()/want.MilliValue())
	}
	return int(max(n, 0))
}

// unknownImageSize stands for an image whose layers neither a node nor
// its registry told: it shares nothing, so the plan spreads such images
// by the tasks alone.
const unknownImageSize = 1 << 30

// pullImages are the run's pools as the plan sees them.
func pullImages(pools []PoolPlan, layers map[string][]v1alpha1.Layer) []pullplan.Image {
	out := make([]pullplan.Image, len(pools))
	for i, p := range pools {
		l := layers[p.Image]
		if len(l) == 0 {
			l = []v1alpha1.Layer{{Digest: "unknown " + p.Image, Size: unknownImageSize}}
		}
		out[i] = pullplan.Image{Ref: p.Image, Layers: l, Tasks: p.Tasks}
	}
	return out
}

// plannedOf is what the passes and the pools use of plan, made for
// nodes (in plan's order) with their hostname labels.
func plannedOf(plan pullplan.Plan, nodes []pullplan.Node, hostnames map[string]string) plannedPulls {
	p := plannedPulls{on: map[string][]string{}}
	images := make([][]string, len(plan.Nodes))
	longest := 0
	for i, n := range plan.Nodes {
		if len(n.Shares) == 0 {
			continue
		}
		hostname := hostnames[n.Node]
		p.nodes = append(p.nodes, plannedNode{name: n.Node, hostname: hostname, slots: nodes[i].Slots, shares: n.Shares})
		images[i] = n.Images()
		longest = max(longest, len(images[i]))
		for _, ref := range images[i] {
			p.on[ref] = append(p.on[ref], hostname)
		}
	}
	made := map[string]bool{}
	for j := range longest {
		for i := range images {
			if j < len(images[i]) && !made[images[i][j]] {
				made[images[i][j]] = true
				p.order = append(p.order, images[i][j])
			}
		}
	}
	return p
}

// queues deals a pass's tasks out to the planned nodes: each node's
// shares take, in turn, as many of their image's tasks as they plan, in
// ts's order. The tasks no share takes — of images the plan left out, or
// more than it planned — are left, in ts's order.
func (p plannedPulls) queues(ts []tasks.Task) (queues [][]tasks.Task, left []tasks.Task) {
	byImage := map[string][]tasks.Task{}
	for _, t := range ts {
		byImage[t.Image] = append(byImage[t.Image], t)
	}
	taken := map[string]int{}
	queues = make([][]tasks.Task, len(p.nodes))
	for i, n := range p.nodes {
		for _, s := range n.shares {
			of := byImage[s.Ref][taken[s.Ref]:]
			take := min(s.Tasks, len(of))
			queues[i] = append(queues[i], of[:take]...)
			taken[s.Ref] += take
		}
	}
	seen := map[string]int{}
	for _, t := range ts {
		if seen[t.Image] >= taken[t.Image] {
			left = append(left, t)
		}
		seen[t.Image]++
	}
	return queues, left
}

// maxJobImages is the most images a PrepullJob lists (its CRD's bound).
const maxJobImages = 2000

// pullJobs are the PrepullJobs of plan: one per node that has images to
// run, listing them in the order it runs them.
func pullJobs(plan pullplan.Plan, hostnames map[string]string, runID string, p plannedPulls) []*v1alpha1.PrepullJob {
	var jobs []*v1alpha1.PrepullJob
	for _, n := range plan.Nodes {
		if images := n.Images(); len(images) > 0 {
			jobs = append(jobs, p.pullJob(runID, hostnames[n.Node], images))
		}
	}
	return jobs
}

// pullJob is the run's PrepullJob that has the node of hostname pull
// images, in their order: one at a time, so that the first is there
// soonest, and so that the first of them its agent says are done are
// those done (agentReports); those it holds already cost a look, no pull.
func (p plannedPulls) pullJob(runID, hostname string, images []string) *v1alpha1.PrepullJob {
	return &v1alpha1.PrepullJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, GenerateName: runID + "-pulls-", Labels: labels.ForRun(runID)},
		Spec: v1alpha1.PrepullJobSpec{Images: images[:min(len(images), maxJobImages)],
			NodeSelector:       map[string]string{corev1.LabelHostname: hostname},
			PerNodeParallelism: 1, DiskHighWaterPercent: p.highWater},
	}
}
