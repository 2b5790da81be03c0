// Package sizing decides how deep each image's warm pool is and how many
// images a windowed strategy keeps warm at once. A pool's depth is the
// number of its sandboxes likely to be claimed at the same time — the
// image's share of the concurrency budget — not its task count, which would
// warm one pod per task and waste most of them. Everything here is a pure
// function of counts, matching agent-sandbox-rl's sizing.
package sizing

import (
	"fmt"
	"math"
)

// Params are the knobs of the spec's FleetConfig that sizing reads.
type Params struct {
	// MaxConcurrent is how many tasks run at once: the budget pools share.
	MaxConcurrent int
	// MaxWarmPoolSize caps every pool.
	MaxWarmPoolSize int
	// WarmPerTask warms one replica per task (capped), so that every task
	// of an image claims at once: the RL instant-claim mode.
	WarmPerTask bool
	// Buffer adds spare replicas to each pool (still capped).
	Buffer int
}

// Replicas is the warm depth for an image with tasksImage of tasksTotal
// tasks: clamp(round(MaxConcurrent·tasksImage/tasksTotal), 1,
// min(tasksImage, MaxWarmPoolSize)), plus Buffer within the same cap. Halves
// round to even, as the reference does.
func Replicas(tasksImage, tasksTotal int, p Params) int {
	if tasksImage <= 0 {
		return 0
	}
	limit := min(tasksImage, p.MaxWarmPoolSize)
	if p.WarmPerTask {
		return limit
	}
	if tasksTotal <= 0 {
		tasksTotal = tasksImage
	}
	share := float64(p.MaxConcurrent) * float64(tasksImage) / float64(tasksTotal)
	r := max(1, int(math.RoundToEven(share))) + max(0, p.Buffer)
	return min(r, limit)
}

// Image is one image of a run and its task count, in run order.
type Image struct {
	Name  string
	Tasks int
}

// Disk describes the node disk that windowed strategies must fit in.
type Disk struct {
	// AvgImageGB is the typical unpacked size of a task image.
	AvgImageGB float64
	// UsableGB is one node's ephemeral disk left for images, after headroom.
	UsableGB float64
	// Nodes spreads distinct images over the pool; 1 is the conservative
	// bound for replicas that may all land on one node.
	Nodes int
}

// Window is how many images the sliding strategy keeps warm: images are
// taken in order while their pools fit MaxConcurrent, and at least one.
func Window(images []Image, p Params) int {
	total := totalTasks(images)
	budget := max(1, p.MaxConcurrent)
	used, window := 0, 0
	for _, img := range images {
		r := Replicas(img.Tasks, total, p)
		if window >= 1 && used+r > budget {
			break
		}
		used += r
		window++
	}
	return max(1, window)
}

// DiskWindow is the largest window whose images fit the disk when
// residentWindows windows may be on disk at once (2 for pipelined). With no
// disk figures every image fits.
func DiskWindow(images []Image, p Params, d Disk, residentWindows float64) int {
	if len(images) == 0 {
		return 1
	}
	if d.AvgImageGB <= 0 || d.UsableGB <= 0 {
		return len(images)
	}
	total := totalTasks(images)
	budget := d.UsableGB * float64(max(1, d.Nodes)) / max(1e-9, residentWindows)
	used, window := 0.0, 0
	for _, img := range images {
		cost := float64(Replicas(img.Tasks, total, p)) * d.AvgImageGB
		if window >= 1 && used+cost > budget {
			break
		}
		used += cost
		window++
	}
	return max(1, window)
}

// SlidingWindow is the window of the sliding strategy: Window, and with
// disk figures no more than fits the nodes' disk.
func SlidingWindow(images []Image, p Params, d Disk) int {
	return min(Window(images, p), DiskWindow(images, p, d, 1))
}

// PipelinedWindow is the window of the double-buffered strategy: two
// windows are warm at once, so it is half the sliding window, and with disk
// figures no more than fits twice over.
func PipelinedWindow(images []Image, p Params, d Disk) int {
	w := max(1, Window(images, p)/2)
	if d.AvgImageGB > 0 && d.UsableGB > 0 {
		w = min(w, DiskWindow(images, p, d, 2))
	}
	return max(1, w)
}

// Plan is the sizing of a whole run.
type Plan struct {
	Pools []Pool `json:"pools"`
	// WarmFootprint is how many sandboxes are warm when every pool is: the
	// naive strategy's peak.
	WarmFootprint   int      `json:"warmFootprint"`
	SlidingWindow   int      `json:"slidingWindow"`
	PipelinedWindow int      `json:"pipelinedWindow"`
	Warnings        []string `json:"warnings,omitempty"`
}

// Pool is one image's warm pool.
type Pool struct {
	Image    string `json:"image"`
	Tasks    int    `json:"tasks"`
	Replicas int    `json:"replicas"`
}

// NewPlan sizes every image's pool and the windows, and says where the
// configuration works against itself. Whether the images fit the disk is
// the strategy's matter: the caller, who knows it, warns.
func NewPlan(images []Image, p Params, d Disk) Plan {
	total := totalTasks(images)
	plan := Plan{SlidingWindow: SlidingWindow(images, p, d), PipelinedWindow: PipelinedWindow(images, p, d)}
	for _, img := range images {
		r := Replicas(img.Tasks, total, p)
		plan.Pools = append(plan.Pools, Pool{Image: img.Name, Tasks: img.Tasks, Replicas: r})
		plan.WarmFootprint += r
		if p.WarmPerTask && img.Tasks > p.MaxWarmPoolSize {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf(
				"%s has %d tasks but maxWarmPoolSize is %d: its pool is clamped to %d, so %d of its tasks wait for a sandbox; raise maxWarmPoolSize for instant claims",
				img.Name, img.Tasks, p.MaxWarmPoolSize, r, img.Tasks-r))
		}
	}
	if p.MaxConcurrent > total && len(images) > 0 {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf(
			"maxConcurrent %d exceeds the %d tasks: at most %d run at once", p.MaxConcurrent, total, total))
	}
	return plan
}

func totalTasks(images []Image) int {
	total := 0
	for _, img := range images {
		total += img.Tasks
	}
	return max(1, total)
}
