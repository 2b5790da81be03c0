package nodecache

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// DefaultHighWaterPercent is a node's disk high-water mark for pulls
// unless a job says otherwise (the PrepullJob CRD's default): below the
// kubelet's image garbage collection, which starts at 85% by default.
const DefaultHighWaterPercent = 80

// CheckHighWater refuses a high-water mark that is not a percentage.
func CheckHighWater(percent int32) error {
	if percent < 1 || percent > 100 {
		return fmt.Errorf("%d: must be a percentage, 1 to 100", percent)
	}
	return nil
}

// Reservations are the pulls of a job under way on a node: how many,
// and the bytes they are expected to add (Estimate each, 0 when no pull
// of the job has finished to tell).
type Reservations struct {
	InFlight int
	Estimate int64
}

// Decision is what a pull waiting for the disk budget does.
type Decision int

const (
	// Start the pull.
	Start Decision = iota
	// Wait for a pull under way to finish, then ask again.
	Wait
	// Stop: no more pulls for the job on this node.
	Stop
)

// Admission is a Decision and why.
type Admission struct {
	Decision Decision
	Why      string
}

// Admit decides whether one more of a job's images may start pulling on
// a node whose image filesystem is fs, with r under way: the pulls under
// way count as the bytes they will add, so parallel pulls stop within one
// image of the high-water mark, not one per puller. A pull starts beside
// others only when its estimate fits under the mark; with nothing under
// way, one starts whenever the filesystem is below it. A filesystem whose
// size the agent cannot see stops every pull.
func Admit(fs v1alpha1.ImageFilesystem, highWaterPercent int32, r Reservations) Admission {
	if fs.CapacityBytes <= 0 {
		return Admission{Stop, "the disk budget cannot be checked: the agent cannot see the image filesystem's size (give the agent --image-fs-path, a directory on the filesystem the runtime keeps images on); no pulls"}
	}
	room := Room(fs, highWaterPercent)
	committed := int64(r.InFlight) * r.Estimate
	switch {
	case committed >= room && r.InFlight > 0:
		return Admission{Wait, ""}
	case committed >= room:
		used := fs.CapacityBytes - fs.AvailableBytes
		percent := float64(used) * 100 / float64(fs.CapacityBytes)
		return Admission{Stop, fmt.Sprintf("the image filesystem is %.0f%% full (%s of %s), at or past the high-water mark of %d%% (the job's, within the agent's --max-high-water); no more pulls",
			percent, quantity(used), quantity(fs.CapacityBytes), highWaterPercent)}
	case r.InFlight > 0 && (r.Estimate == 0 || committed+r.Estimate > room):
		return Admission{Wait, ""}
	}
	return Admission{Start, ""}
}

// Room is how many bytes may still be pulled onto the image filesystem fs
// before it is highWaterPercent full, counting all that fills it, not
// only images (a node's logs and containers' writes share it); negative
// past the mark. It is what an agent admits pulls by, so a plan of
// pulls sized by it asks no more of a node than its agent will pull.
func Room(fs v1alpha1.ImageFilesystem, highWaterPercent int32) int64 {
	mark := fs.CapacityBytes * int64(highWaterPercent) / 100
	return mark - (fs.CapacityBytes - fs.AvailableBytes)
}

func quantity(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}

// imageState is where one image of a job is on a node.
type imageState int

const (
	statePending imageState = iota
	statePulled
	statePresent
	stateFailed
)

// maxFailuresListed bounds the failures a node lists, to keep a job with
// many nodes small; the counts say how many there were.
const maxFailuresListed = 10

// NodeProgress is one node's progress on a job, kept by the node's agent.
type NodeProgress struct {
	images   []string
	state    map[string]imageState
	failures []v1alpha1.ImagePullFailure
	// stopped says why the node stopped pulling, if it did.
	stopped string
}

// NewNodeProgress is a node's progress on images, each once, all pending.
func NewNodeProgress(images []string) *NodeProgress {
	p := &NodeProgress{state: map[string]imageState{}}
	for _, img := range images {
		if _, dup := p.state[img]; !dup {
			p.state[img] = statePending
			p.images = append(p.images, img)
		}
	}
	return p
}

// Images are the job's images, each once, in the job's order.
func (p *NodeProgress) Images() []string { return p.images }

// Pulled records that the node pulled image.
func (p *NodeProgress) Pulled(image string) { p.state[image] = statePulled }

// Present records that the node had image already.
func (p *NodeProgress) Present(image string) { p.state[image] = statePresent }

// Stop records why the node stopped pulling.
func (p *NodeProgress) Stop(why string) { p.stopped = why }

// Stopped reports whether the node stopped pulling.
func (p *NodeProgress) Stopped() bool { return p.stopped != "" }

// Fail records that image failed to pull, and why.
func (p *NodeProgress) Fail(image, msg string) {
	p.state[image] = stateFailed
	if len(p.failures) < maxFailuresListed {
		p.failures = append(p.failures, v1alpha1.ImagePullFailure{Image: image, Message: msg})
	}
}

// Status is the node's entry in the job's status at now.
func (p *NodeProgress) Status(node string, now time.Time) v1alpha1.NodePrepullStatus {
	s := v1alpha1.NodePrepullStatus{Node: node, UpdateTime: metav1.NewTime(now), Failures: slices.Clone(p.failures)}
	for _, img := range p.images {
		switch p.state[img] {
		case statePending:
			s.Pending++
		case statePulled:
			s.Pulled++
		case statePresent:
			s.Present++
		case stateFailed:
			s.Failed++
		}
	}
	switch {
	case p.stopped != "":
		s.Phase, s.Message = v1alpha1.PrepullStopped, p.stopped
	case s.Pending > 0:
		s.Phase = v1alpha1.PrepullPulling
	case s.Failed > 0:
		s.Phase = v1alpha1.PrepullFailed
		s.Message = fmt.Sprintf("%d of %d images failed to pull", s.Failed, len(p.images))
	default:
		s.Phase = v1alpha1.PrepullSucceeded
	}
	return s
}

// Final reports whether a node's entry is final: a job whose entry for
// the node is final is not run again when the agent restarts.
func Final(s v1alpha1.NodePrepullStatus) bool {
	return s.Phase == v1alpha1.PrepullSucceeded || s.Phase == v1alpha1.PrepullFailed || s.Phase == v1alpha1.PrepullStopped
}

// JobProgress is a PrepullJob's progress over the nodes it targets.
type JobProgress struct {
	// Nodes are the targeted nodes' entries, by name; a node whose agent
	// has not written yet is Pulling with everything pending.
	Nodes []v1alpha1.NodePrepullStatus `json:"nodes"`
	// Pulled, Present, Failed and Pending sum the nodes' counts.
	Pulled  int32 `json:"pulled"`
	Present int32 `json:"present"`
	Failed  int32 `json:"failed"`
	Pending int32 `json:"pending"`
	// Done counts the nodes whose entry is final; Succeeded those where
	// every image is on the node.
	Done      int `json:"done"`
	Succeeded int `json:"succeeded"`
}

// Finished reports whether every targeted node is done.
func (p JobProgress) Finished() bool { return p.Done == len(p.Nodes) }

// Progress sums job's entries for the targeted nodes. Entries of other
// nodes (no longer targeted, or an agent's mistake) are left out.
func Progress(job *v1alpha1.PrepullJob, targets []string) JobProgress {
	entries := map[string]v1alpha1.NodePrepullStatus{}
	for _, e := range job.Status.Nodes {
		entries[e.Node] = e
	}
	images := int32(len(NewNodeProgress(job.Spec.Images).images))
	sorted := slices.Clone(targets)
	slices.Sort(sorted)
	var p JobProgress
	for _, node := range slices.Compact(sorted) {
		e, ok := entries[node]
		if !ok {
			e = v1alpha1.NodePrepullStatus{Node: node, Phase: v1alpha1.PrepullPulling, Pending: images,
				Message: "its agent has not started on the job yet"}
		}
		p.Nodes = append(p.Nodes, e)
		p.Pulled, p.Present, p.Failed, p.Pending = p.Pulled+e.Pulled, p.Present+e.Present, p.Failed+e.Failed, p.Pending+e.Pending
		if Final(e) {
			p.Done++
		}
		if e.Phase == v1alpha1.PrepullSucceeded {
			p.Succeeded++
		}
	}
	return p
}

// DeleteStagger spaces the agents that may delete an expired PrepullJob:
// the first node by name deletes it when it expires, the next one
// DeleteStagger later if it is still there, and so on, so one request
// deletes it however many nodes took part, and a node that is gone
// holds nothing up for long.
const DeleteStagger = 5 * time.Second

// DeleteAt is when node's agent is to delete job: TTLSecondsAfterFinished
// after the last of its nodes finished (the latest updateTime), plus the
// node's turn. It reports false while the job has no TTL, a node is still
// pulling, or node took no part in it.
func DeleteAt(job *v1alpha1.PrepullJob, node string) (time.Time, bool) {
	ttl := job.Spec.TTLSecondsAfterFinished
	if ttl == nil {
		return time.Time{}, false
	}
	var finished time.Time
	turn := -1
	for _, e := range job.Status.Nodes {
		if !Final(e) {
			return time.Time{}, false
		}
		if e.UpdateTime.After(finished) {
			finished = e.UpdateTime.Time
		}
		if e.Node == node {
			turn = 0
		}
	}
	if turn < 0 {
		return time.Time{}, false
	}
	for _, e := range job.Status.Nodes {
		if e.Node < node {
			turn++
		}
	}
	return finished.Add(time.Duration(*ttl)*time.Second + time.Duration(turn)*DeleteStagger), true
}
