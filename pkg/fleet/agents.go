package fleet

import (
	"cmp"
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// agentReport is what a node's agent wrote of its pulls in the run's
// PrepullJobs.
type agentReport struct {
	// sign changes with every write of the node's entries.
	sign string
	// pulling is true while an entry is Pulling, with images to go.
	pulling bool
	// held are the images the node pulled or had.
	held map[string]bool
}

// agentReports are the reports of the nodes (by name) that wrote in jobs.
// The run's jobs pull one image at a time, in order: the first of a job's
// images, as many as its entry says are done, are those done.
func agentReports(jobs []v1alpha1.PrepullJob) map[string]agentReport {
	out := map[string]agentReport{}
	for _, job := range jobs {
		for _, e := range job.Status.Nodes {
			r := out[e.Node]
			if r.held == nil {
				r.held = map[string]bool{}
			}
			r.sign += job.Name + "@" + e.UpdateTime.UTC().String() + " "
			r.pulling = r.pulling || e.Phase == v1alpha1.PrepullPulling && e.Pending > 0
			done := int(e.Pulled + e.Present + e.Failed)
			for _, img := range job.Spec.Images[:min(max(done, 0), len(job.Spec.Images))] {
				if !slices.ContainsFunc(e.Failures, func(f v1alpha1.ImagePullFailure) bool { return f.Image == img }) {
					r.held[img] = true
				}
			}
			out[e.Node] = r
		}
	}
	return out
}

// agentWatch tells the planned nodes whose agent stopped: one that said
// it was pulling and has written nothing since for silence. An agent
// writes at least every v1alpha1.PrepullHeartbeat while it pulls, so a
// long pull is not taken for a stopped agent. Only the run's clock is
// read: the agents' may be off.
type agentWatch struct {
	silence time.Duration
	// seen is each pulling node's last sign and when it was first seen.
	seen map[string]agentSeen
}

type agentSeen struct {
	sign string
	at   time.Time
}

// newAgentWatch watches for agents silent for silence; none (a config
// not from config.Default or Load) is the default, not an instant.
func newAgentWatch(silence time.Duration) *agentWatch {
	return &agentWatch{silence: cmp.Or(silence, config.DefaultAgentSilence), seen: map[string]agentSeen{}}
}

// stopped records node's report r (ok false: none) seen at now and reports
// whether the node's agent stopped.
func (w *agentWatch) stopped(node string, r agentReport, ok bool, now time.Time) bool {
	if !ok || !r.pulling {
		delete(w.seen, node)
		return false
	}
	s, seen := w.seen[node]
	if !seen || s.sign != r.sign {
		w.seen[node] = agentSeen{sign: r.sign, at: now}
		return false
	}
	return now.Sub(s.at) >= w.silence
}

// watchAgents reads the run's PrepullJobs and takes from each planned
// node whose agent stopped the tasks it has not pulled the images of.
func (f *Fleet) watchAgents(ctx context.Context, q *queued, w *agentWatch) {
	c := f.clusters[0]
	jobs := &v1alpha1.PrepullJobList{}
	if err := c.Clients.Client.List(ctx, jobs, client.InNamespace(c.Namespace()), client.MatchingLabels(labels.ForRun(f.runID))); err != nil {
		// The next look tries again; a stopped agent only costs its
		// node's kubelet the pulls meanwhile.
		return
	}
	reports := agentReports(jobs.Items)
	now := time.Now()
	for _, n := range q.nodes {
		q.mu.Lock()
		out := n.dropped || n.agentStopped
		q.mu.Unlock()
		r, ok := reports[n.name]
		if !out && w.stopped(n.name, r, ok, now) {
			f.agentStopped(ctx, q, n, r, jobs.Items)
		}
	}
}

// agentStopped takes from n, whose agent stopped, the tasks not started
// of the images its agent did not pull, which go to the other planned
// nodes (replan) and no more to n; n runs the rest. Its jobs, of the
// run's jobs, are deleted (those it never wrote in too): an agent that
// comes back pulls nothing n no longer runs.
func (f *Fleet) agentStopped(ctx context.Context, q *queued, n *nodeQueue, r agentReport, jobs []v1alpha1.PrepullJob) {
	q.mu.Lock()
	n.agentStopped = true
	moved := n.lanes.take(func(t tasks.Task) bool { return !r.held[t.Image] })
	n.load -= len(moved)
	q.mu.Unlock()
	f.log.Info("Planned pulls: a planned node's agent stopped reporting its pulls; the tasks of the images it has not pulled go to the other planned nodes",
		"node", n.hostname, "silence", f.cfg.AgentSilence.Duration, "moved", len(moved), "held", len(r.held))
	c := f.clusters[0]
	for _, job := range jobs {
		if job.Spec.NodeSelector[corev1.LabelHostname] != n.hostname {
			continue
		}
		if err := client.IgnoreNotFound(c.Clients.Client.Delete(ctx, &job)); err != nil && ctx.Err() == nil {
			f.log.Error(err, "Planned pulls: deleting the PrepullJob of a node whose agent stopped failed; the run's end deletes it", "job", job.Name)
		}
	}
	for _, img := range imagesOf(moved) {
		f.mu.Lock()
		on := slices.DeleteFunc(slices.Clone(f.plannedNodes(img.Name)), func(h string) bool { return h == n.hostname })
		f.mu.Unlock()
		if err := f.planOn(ctx, img.Name, on); err != nil {
			f.log.Error(err, "Planned pulls: keeping an image's sandboxes off a node whose agent stopped failed", "image", img.Name, "node", n.hostname)
		}
	}
	f.replan(ctx, q, moved)
}
