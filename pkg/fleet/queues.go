package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// runQueues runs the tasks the pull plan dealt out to its nodes, each
// node's queue apart from the others: as many of its tasks at once as
// the node has slots (and the run's concurrency over all of them), in
// the order its agent pulls their images, so that a node starts its
// next image's tasks as its slots free, whatever the other nodes are at
// — no window ends with its slowest task.
//
// Each task's sandbox starts cold on a planned node of its image, from a
// pool that holds none: the agent's pull is the warming. A warm sandbox
// would be started before its node had a slot for it, and would take the
// slot its own image's claims wait for; a cold one starts when the task
// is next, in the slot the node's last task freed. Pools are made ahead
// of the tasks in the plan's order, and removed, as the windows' are,
// once the pass's last task of their image is done (kept for the next
// epoch's). Sandboxes are kept clean for the next task of their image on
// the node only (see lanes), never past the node's last: a node's kept
// sandbox holds a slot its next image needs.
//
// A node that goes (deleted, not Ready, cordoned) takes no more tasks:
// those it had not started go to the other planned nodes (see replan),
// and so do those still waiting for their sandbox, cut short: a sandbox
// not yet scheduled there never would be. A node deleted or not Ready has
// the tasks it runs cut short too; a cordoned one runs them to the end.
// The tasks no node is left for are returned, for the strategy's windows
// to run without a plan.
func (f *Fleet) runQueues(ctx context.Context, epoch int, queues [][]tasks.Task, o RunOptions, onResult func(Result)) ([]tasks.Task, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	q := &queued{pools: newQueuedPools(queues), nodes: make([]*nodeQueue, len(queues))}
	for i, ts := range queues {
		nctx, gone := context.WithCancelCause(ctx)
		l, stop := newLanes(nctx, ts, f.Recycling())
		defer stop()
		// Tasks of a node that went may come.
		l.open = true
		q.nodes[i] = &nodeQueue{plannedNode: f.pulls.nodes[i], ctx: nctx, gone: gone, lanes: l, load: len(ts),
			claiming: map[string]context.CancelCauseFunc{}}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := f.makeQueuedPools(ctx, q.pools); err != nil {
			cancel(err)
		}
	})
	wg.Go(func() {
		select {
		case <-q.pools.all:
			for _, n := range q.nodes {
				n.lanes.close()
			}
		case <-ctx.Done():
		}
	})
	wg.Go(func() { f.watchPlannedNodes(ctx, q) })
	running := make(chan struct{}, concurrency(f.cfg))
	for _, n := range q.nodes {
		wg.Go(func() { f.runQueue(ctx, epoch, n, q, running, o, onResult) })
	}
	wg.Wait()
	return q.orphans, context.Cause(ctx)
}

// queued is the state of runQueues.
type queued struct {
	pools *queuedPools
	// mu guards the nodes' dropped, load and claiming, and orphans.
	mu    sync.Mutex
	nodes []*nodeQueue
	// orphans are the tasks no planned node was left for.
	orphans []tasks.Task
}

// nodeQueue is a planned node's queue. Its ctx ends when the node goes.
type nodeQueue struct {
	plannedNode
	ctx   context.Context
	gone  context.CancelCauseFunc
	lanes *lanes
	// load is the tasks of the queue not yet done.
	load    int
	dropped bool
	// agentStopped is set once the node's agent stopped pulling: the node
	// runs the tasks of the images it holds, and takes no others.
	agentStopped bool
	// claiming cuts short, by task ID, the tasks waiting for a sandbox.
	claiming map[string]context.CancelCauseFunc
}

// runQueue runs n's queue with as many workers as n has slots, each task
// once its pool is made and one of running's places is free. A task the
// node's going cut short goes to another node, with no result.
func (f *Fleet) runQueue(ctx context.Context, epoch int, n *nodeQueue, q *queued, running chan struct{}, o RunOptions, onResult func(Result)) {
	var wg sync.WaitGroup
	for range n.slots {
		wg.Go(func() {
			for {
				t, ok := n.lanes.next()
				if !ok {
					return
				}
				failed, ok := q.pools.wait(n.ctx, t.Image)
				if !ok {
					f.requeue(ctx, q, n, t)
					continue
				}
				select {
				case running <- struct{}{}:
				case <-n.ctx.Done():
					f.requeue(ctx, q, n, t)
					continue
				}
				tctx, claimed, end, ok := q.claiming(n, t.ID)
				if !ok {
					<-running
					f.requeue(ctx, q, n, t)
					continue
				}
				keep := func() bool { return n.lanes.more(t.Image) }
				// The pools hold none: no refill waits to be drained.
				r := f.task(tctx, epoch, t, failed, o, keep, func() {}, claimed)
				cutShort := tctx.Err() != nil
				end()
				<-running
				n.lanes.done(t.Image)
				if !r.OK && cutShort {
					f.requeue(ctx, q, n, t)
					continue
				}
				onResult(r)
				f.queuedDone(ctx, epoch, q, n, t.Image)
			}
		})
	}
	wg.Wait()
}

// claiming records that n's task id waits for its sandbox, and returns
// the task's context, which n's going cuts short until claimed is called,
// and end, which frees it once the task is over; false when n is gone
// already.
func (q *queued) claiming(n *nodeQueue, id string) (_ context.Context, claimed, end func(), ok bool) {
	ctx, cut := context.WithCancelCause(n.ctx)
	q.mu.Lock()
	defer q.mu.Unlock()
	if n.dropped {
		cut(nil)
		return nil, nil, nil, false
	}
	n.claiming[id] = cut
	claimed = sync.OnceFunc(func() {
		q.mu.Lock()
		delete(n.claiming, id)
		q.mu.Unlock()
	})
	return ctx, claimed, func() {
		claimed()
		cut(nil)
	}, true
}

// requeue gives t, which n's going kept from running, to another node —
// unless the pass itself is ending: then it has no result, and a resumed
// run does it.
func (f *Fleet) requeue(ctx context.Context, q *queued, n *nodeQueue, t tasks.Task) {
	if ctx.Err() != nil {
		return
	}
	q.mu.Lock()
	n.load--
	q.mu.Unlock()
	f.replan(ctx, q, []tasks.Task{t})
}

// queuedDone records a task of image done on n: the last of the image
// removes its pool, unless a later epoch runs it.
func (f *Fleet) queuedDone(ctx context.Context, epoch int, q *queued, n *nodeQueue, image string) {
	q.mu.Lock()
	n.load--
	q.mu.Unlock()
	if q.pools.done(image) && epoch == f.cfg.Epochs {
		if err := f.unwarmWindow(ctx, []string{image}); err != nil && ctx.Err() == nil {
			f.log.Error(err, "Removing the pool of an image whose tasks are done failed; teardown removes it", "image", image)
		}
	}
}

// replan deals ts out to the planned nodes still there: each to the
// least loaded of those that run its image, or else of all of them, whose
// hostname its pool's template then allows, and whose agent then pulls
// it. What no node is left for is an orphan.
func (f *Fleet) replan(ctx context.Context, q *queued, ts []tasks.Task) {
	f.pullMoved(ctx, f.deal(ctx, q, ts))
}

// deal deals ts out as replan says, and returns the images each node
// (by hostname) takes that it did not run.
func (f *Fleet) deal(ctx context.Context, q *queued, ts []tasks.Task) map[string][]string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var orphans []tasks.Task
	moved := map[string][]string{}
	for _, t := range ts {
		f.mu.Lock()
		on := slices.Clone(f.plannedNodes(t.Image))
		f.mu.Unlock()
		to := q.target(on)
		if to == nil {
			orphans = append(orphans, t)
			continue
		}
		if !runsOn(on, to) {
			if err := f.planOn(ctx, t.Image, append(on, to.hostname)); err != nil {
				f.log.Error(err, "Planned pulls: allowing a task's image on another node failed; the task runs without a plan", "task", t.ID, "node", to.hostname)
				orphans = append(orphans, t)
				continue
			}
			moved[to.hostname] = append(moved[to.hostname], t.Image)
		}
		to.load++
		to.lanes.add([]tasks.Task{t})
	}
	if len(orphans) == 0 {
		return moved
	}
	for _, img := range imagesOf(orphans) {
		// Their pools, under the strategy's windows, go where the
		// scheduler puts them.
		if err := f.planOn(ctx, img.Name, nil); err != nil {
			f.log.Error(err, "Planned pulls: lifting the node affinity of an image no planned node is left for failed", "image", img.Name)
		}
	}
	q.orphans = append(q.orphans, orphans...)
	q.pools.forget(orphans)
	return moved
}

// pullMoved has the agent of each node (by hostname) of moved pull the
// images it took, in the order it took them, with a PrepullJob of the
// run; one that fails to be created leaves the node's kubelet to pull
// them as their sandboxes start.
func (f *Fleet) pullMoved(ctx context.Context, moved map[string][]string) {
	c := f.clusters[0]
	for hostname, images := range moved {
		f.mu.Lock()
		job := f.pulls.pullJob(f.runID, hostname, images)
		f.mu.Unlock()
		if err := c.Clients.Client.Create(ctx, job); err != nil && ctx.Err() == nil {
			f.log.Error(err, "Planned pulls: having a node's agent pull the images of the tasks it took failed; its kubelet pulls them as their sandboxes start", "node", hostname, "images", len(images))
		}
	}
}

// target is the node still there, its agent too, to take a task of an
// image planned on the nodes of hostnames on: the least loaded of those
// that run it, or else of all. Callers hold q.mu.
func (q *queued) target(on []string) *nodeQueue {
	var to *nodeQueue
	for _, n := range q.nodes {
		switch {
		case n.dropped, n.agentStopped:
		case to == nil, runsOn(on, n) && !runsOn(on, to):
			to = n
		case runsOn(on, n) == runsOn(on, to) && n.load < to.load:
			to = n
		}
	}
	return to
}

// runsOn reports whether n is among the hostnames on.
func runsOn(on []string, n *nodeQueue) bool { return slices.Contains(on, n.hostname) }

// planOn has image's sandboxes run on the nodes of hostnames (none: no
// plan), in its template too when its pool is made; the Agent Sandbox
// controller reads the template at each cold start.
func (f *Fleet) planOn(ctx context.Context, image string, hostnames []string) error {
	f.mu.Lock()
	f.pulls.on[image] = hostnames
	p, ok := f.warm[image]
	if !ok {
		f.mu.Unlock()
		return nil
	}
	tmpl, err := f.templateOf(p.cluster, image)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	old := p.template
	p.template = tmpl
	f.mu.Unlock()
	return p.cluster.Clients.Client.Patch(ctx, tmpl.DeepCopy(), client.MergeFrom(old))
}

// replanEvery is how often the planned nodes are looked at.
const replanEvery = 5 * time.Second

// watchPlannedNodes looks at the planned nodes every replanEvery until
// ctx ends or every task is done, and drops those gone; and at their
// agents, taking from those whose agent stopped what it has not pulled.
func (f *Fleet) watchPlannedNodes(ctx context.Context, q *queued) {
	c := f.clusters[0]
	tick := time.NewTicker(replanEvery)
	defer tick.Stop()
	agents := newAgentWatch(f.cfg.AgentSilence.Duration)
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.pools.all:
			return
		case <-tick.C:
		}
		nodes := &corev1.NodeList{}
		if err := c.Clients.Client.List(ctx, nodes, client.MatchingLabels(c.spec.NodeSelector)); err != nil {
			if !failing && ctx.Err() == nil {
				f.log.Error(err, "Planned pulls: reading the nodes failed; a planned node that goes is not seen until it works again", "cluster", c.Name)
			}
			failing = true
			continue
		}
		failing = false
		there := map[string]string{}
		for _, node := range nodes.Items {
			there[node.Labels[corev1.LabelHostname]] = nodeGone(node)
		}
		for _, n := range q.nodes {
			why, ok := there[n.hostname]
			switch {
			case !ok:
				f.dropNode(ctx, q, n, "deleted", true)
			case why != "":
				f.dropNode(ctx, q, n, why, why != cordoned)
			}
		}
		f.watchAgents(ctx, q, agents)
	}
}

// cordoned is why a node that runs what it has takes no more sandboxes.
const cordoned = "cordoned"

// nodeGone says why a node takes no more sandboxes, or "" when it does.
func nodeGone(n corev1.Node) string {
	if n.Spec.Unschedulable {
		return cordoned
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return "not Ready"
		}
	}
	return ""
}

// errNodeGone ends the tasks of a planned node that went.
var errNodeGone = errors.New("its planned node went")

// dropNode stops n's queue and deals the tasks it had not started to the
// other nodes, and cuts short those waiting for a sandbox — and, when n
// is lost, those it runs — which follow as they end.
func (f *Fleet) dropNode(ctx context.Context, q *queued, n *nodeQueue, why string, lost bool) {
	cause := fmt.Errorf("%w: node %s %s", errNodeGone, n.hostname, why)
	q.mu.Lock()
	if n.dropped {
		q.mu.Unlock()
		return
	}
	n.dropped = true
	pending := n.lanes.take(func(tasks.Task) bool { return true })
	n.load -= len(pending)
	running, claiming := n.load, len(n.claiming)
	for _, cut := range n.claiming {
		cut(cause)
	}
	q.mu.Unlock()
	f.log.Info("Planned pulls: a planned node went; the tasks it has not done go to the other planned nodes", "node", n.hostname, "why", why,
		"pending", len(pending), "running", running, "claiming", claiming, "cutShort", lost)
	if lost {
		n.gone(cause)
	}
	n.lanes.close()
	f.replan(ctx, q, pending)
}

// makeQueuedPools makes the pools of the queues' images, none warm, in
// the plan's order: as many at a time as there are nodes, so that every
// node's first image is first. Pools kept from the last epoch are made.
func (f *Fleet) makeQueuedPools(ctx context.Context, pools *queuedPools) error {
	var images, kept []string
	for _, img := range f.pulls.order {
		f.mu.Lock()
		_, warm := f.warm[img]
		f.mu.Unlock()
		switch {
		case !pools.runs(img):
		case warm:
			kept = append(kept, img)
		default:
			images = append(images, img)
		}
	}
	pools.made(kept, nil)
	none := func(string) int { return 0 }
	for _, batch := range chunk(images, max(len(f.pulls.nodes), 1)) {
		failed, err := f.warmWindow(ctx, batch, none)
		if err != nil {
			return err
		}
		pools.made(batch, failed)
	}
	return nil
}

// queuedPools follows the pools of runQueues: which are made, what was
// given up of them, and how many tasks of each image are still to run;
// all is closed once none is.
type queuedPools struct {
	mu     sync.Mutex
	left   map[string]int
	total  int
	all    chan struct{}
	ready  map[string]chan struct{}
	failed map[string]WarmError
}

func newQueuedPools(queues [][]tasks.Task) *queuedPools {
	p := &queuedPools{left: map[string]int{}, all: make(chan struct{}), ready: map[string]chan struct{}{}, failed: map[string]WarmError{}}
	for _, q := range queues {
		for _, t := range q {
			if p.left[t.Image] == 0 {
				p.ready[t.Image] = make(chan struct{})
			}
			p.left[t.Image]++
			p.total++
		}
	}
	if p.total == 0 {
		close(p.all)
	}
	return p
}

// made records that the pools of images are made, but for those failed
// gives up.
func (p *queuedPools) made(images []string, failed WarmError) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, img := range images {
		p.failed[img] = failed
		close(p.ready[img])
	}
}

// wait waits until image's pool is made and returns what its batch gave
// up; false when ctx ended first.
func (p *queuedPools) wait(ctx context.Context, image string) (WarmError, bool) {
	select {
	case <-p.ready[image]:
	case <-ctx.Done():
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed[image], true
}

// runs reports whether the queues run tasks of image.
func (p *queuedPools) runs(image string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left[image] > 0
}

// done records a task of image done and reports whether it was the
// image's last.
func (p *queuedPools) done(image string) (last bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.left[image]--
	p.count(1)
	return p.left[image] == 0
}

// forget records that ts leave the queues.
func (p *queuedPools) forget(ts []tasks.Task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range ts {
		p.left[t.Image]--
	}
	p.count(len(ts))
}

// count takes n off the total and closes all once it is none. Callers
// hold mu.
func (p *queuedPools) count(n int) {
	p.total -= n
	if p.total == 0 && n > 0 {
		close(p.all)
	}
}
