// Package capacity recommends how to run a task batch on the nodes a
// cluster entry selects: it reads what they offer (allocatable CPU,
// memory and pods, image filesystems, and from their NodeImageCaches what
// they already hold of the task images), and then, by a stated model of
// a run's wall time, chooses the strategy, concurrency and warm-pool
// settings that finish soonest and names what bounds them. Everything but
// the Read functions is a pure function of plain data.
//
// The model: a run's wall time is its pulls, its tasks and its claims.
// Images share layers (a SWE-bench sweep's images share a base and an
// environment per repository), so pulls are counted in layers: an image's
// replicas are spread over the nodes in turn (on one node when
// colocated), and each node pulls the layers it lacks once, all nodes at
// once at the given bandwidth each; a window's pull takes as long as its
// busiest node's. An image whose layers nobody knows is one layer of the
// assumed size. Tasks run in waves of the concurrency (a window of fewer
// tasks runs fewer at once), each taking the given task time. Claims are
// made at most at the control plane's given rate. naive and sliding pull
// before they run; pipelined pulls the next window while one runs, so
// only its first window's pull is not hidden.
package capacity

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
)

// GiB is how the configuration counts its GB.
const GiB = 1 << 30

// Node is what the planner reads of one node.
type Node struct {
	Name string `json:"name"`
	// Pool is its node pool, by the cloud's pool label, or "" for none.
	Pool           string `json:"pool,omitempty"`
	CPUMilli       int64  `json:"cpuMilli"`
	MemoryBytes    int64  `json:"memoryBytes"`
	Pods           int64  `json:"pods"`
	EphemeralBytes int64  `json:"ephemeralBytes"`
	// ImageFSBytes is its image filesystem's size from its NodeImageCache,
	// 0 when it publishes none.
	ImageFSBytes int64 `json:"imageFSBytes,omitempty"`
	// Holds are the digests of the task images' layers the node holds.
	Holds map[string]bool `json:"-"`
}

// DiskBytes is the disk the node keeps images on: its image filesystem,
// or without a NodeImageCache its allocatable ephemeral storage.
func (n Node) DiskBytes() int64 {
	if n.ImageFSBytes > 0 {
		return n.ImageFSBytes
	}
	return n.EphemeralBytes
}

// Image is a task image: its tasks, and its layers when some node's
// cache lists it.
type Image struct {
	Name   string           `json:"name"`
	Tasks  int              `json:"tasks"`
	Layers []v1alpha1.Layer `json:"layers,omitempty"`
}

// layersOr are the image's layers, or one layer of size bytes named
// after it when they are unknown.
func (img Image) layersOr(bytes int64) []v1alpha1.Layer {
	if len(img.Layers) > 0 {
		return img.Layers
	}
	return []v1alpha1.Layer{{Digest: "unknown:" + img.Name, Size: bytes}}
}

// Probe is the nodes a cluster entry selects and the run's images.
type Probe struct {
	Cluster string  `json:"cluster"`
	Nodes   []Node  `json:"nodes"`
	Images  []Image `json:"images"`
}

// Totals are what a probe's nodes offer together.
type Totals struct {
	Nodes       int   `json:"nodes"`
	CPUMilli    int64 `json:"cpuMilli"`
	MemoryBytes int64 `json:"memoryBytes"`
	Pods        int64 `json:"pods"`
	// DiskBytes sums the nodes' image disks (DiskBytes).
	DiskBytes int64 `json:"diskBytes"`
	// CachedNodes publish a NodeImageCache.
	CachedNodes int `json:"cachedNodes"`
}

// Pool is a node pool's share of a probe.
type Pool struct {
	Name string `json:"name"`
	Totals
	// ImageBytes are the known images' distinct layers' bytes;
	// ToPullBytes those of the layers no node of the pool holds.
	ImageBytes  int64 `json:"imageBytes"`
	ToPullBytes int64 `json:"toPullBytes"`
}

// Pools are the probe's nodes by pool, in name order.
func (p Probe) Pools() []Pool {
	byName := map[string]*Pool{}
	var names []string
	nodesOf := map[string][]Node{}
	for _, n := range p.Nodes {
		name := n.Pool
		if name == "" {
			name = "(no pool label)"
		}
		pool, ok := byName[name]
		if !ok {
			pool = &Pool{Name: name}
			byName[name] = pool
			names = append(names, name)
		}
		pool.add(n)
		nodesOf[name] = append(nodesOf[name], n)
	}
	slices.Sort(names)
	out := make([]Pool, 0, len(names))
	for _, name := range names {
		pool := byName[name]
		for _, l := range p.layers() {
			pool.ImageBytes += l.Size
			if !slices.ContainsFunc(nodesOf[name], func(n Node) bool { return n.Holds[l.Digest] }) {
				pool.ToPullBytes += l.Size
			}
		}
		out = append(out, *pool)
	}
	return out
}

func (t *Totals) add(n Node) {
	t.Nodes++
	t.CPUMilli += n.CPUMilli
	t.MemoryBytes += n.MemoryBytes
	t.Pods += n.Pods
	t.DiskBytes += n.DiskBytes()
	if n.ImageFSBytes > 0 {
		t.CachedNodes++
	}
}

// Totals are what all the probe's nodes offer.
func (p Probe) Totals() Totals {
	var t Totals
	for _, n := range p.Nodes {
		t.add(n)
	}
	return t
}

// layers are the known images' distinct layers.
func (p Probe) layers() []v1alpha1.Layer {
	seen := map[string]bool{}
	var out []v1alpha1.Layer
	for _, img := range p.Images {
		for _, l := range img.Layers {
			if !seen[l.Digest] {
				seen[l.Digest] = true
				out = append(out, l)
			}
		}
	}
	return out
}

// Model are the rates the wall-time model assumes.
type Model struct {
	// PullBytesPerSecond is one node's pull bandwidth.
	PullBytesPerSecond int64 `json:"pullBytesPerSecond"`
	// TaskTime is how long one task runs in its sandbox.
	TaskTime time.Duration `json:"taskTime"`
	// ClaimsPerSecond is the most claims the control plane turns into
	// sandboxes a second.
	ClaimsPerSecond float64 `json:"claimsPerSecond"`
	// ImageBytes is the size assumed for an image whose layers no node
	// or registry told.
	ImageBytes int64 `json:"imageBytes"`
}

// Sandbox is what one sandbox requests.
type Sandbox struct {
	CPUMilli    int64 `json:"cpuMilli"`
	MemoryBytes int64 `json:"memoryBytes"`
}

// SandboxOf is the sandbox that requests are a template's requests of.
func SandboxOf(requests corev1.ResourceList) Sandbox {
	return Sandbox{CPUMilli: requests.Cpu().MilliValue(), MemoryBytes: requests.Memory().Value()}
}

// Limits are how many sandboxes the nodes hold at once by each resource.
type Limits struct {
	CPU    int `json:"cpu"`
	Memory int `json:"memory"`
	Pods   int `json:"pods"`
}

// NewLimits divides the totals by a sandbox's requests; a resource it
// does not request does not limit.
func NewLimits(t Totals, sb Sandbox) Limits {
	per := func(total, each int64) int {
		if each <= 0 {
			return math.MaxInt32
		}
		return int(total / each)
	}
	return Limits{CPU: per(t.CPUMilli, sb.CPUMilli), Memory: per(t.MemoryBytes, sb.MemoryBytes), Pods: int(t.Pods)}
}

// Fit is the least of the limits and the resource setting it.
func (l Limits) Fit() (int, string) {
	n, by := l.CPU, "cpu"
	if l.Memory < n {
		n, by = l.Memory, "memory"
	}
	if l.Pods < n {
		n, by = l.Pods, "pods"
	}
	return n, by
}

// WarmPool is one image's warm pool in a run's shape: its tasks and the
// replicas warmed for them.
type WarmPool struct {
	Image    string
	Tasks    int
	Replicas int
}

// Shape is a candidate run: a strategy at a concurrency, and the windows
// its plan warms the images in.
type Shape struct {
	Strategy    string
	Concurrency int
	// Windows are the plan's windows: the images warm together, with the
	// replicas of each.
	Windows [][]WarmPool
	// Colocate puts an image's replicas on one node.
	Colocate bool
	Epochs   int
}

// Estimate is the model's account of a shape.
type Estimate struct {
	Pull   time.Duration `json:"pull"`
	Tasks  time.Duration `json:"tasks"`
	Claims time.Duration `json:"claims"`
	// Wall is the predicted wall time; Bound the term that sets it: pull,
	// tasks or control-plane.
	Wall  time.Duration `json:"wall"`
	Bound string        `json:"bound"`
}

// Predict estimates a shape's wall time on the probe's nodes.
func Predict(p Probe, s Shape, m Model) Estimate {
	nodes := max(1, len(p.Nodes))
	// What each node holds, as the run's pulls add to it.
	held := make([]map[string]bool, nodes)
	for i := range held {
		held[i] = map[string]bool{}
		if i < len(p.Nodes) {
			maps.Copy(held[i], p.Nodes[i].Holds)
		}
	}
	byName := map[string]Image{}
	for _, img := range p.Images {
		byName[img.Name] = img
	}
	bandwidth := float64(max(1, m.PullBytesPerSecond))
	next := 0
	pullOf := func(window []WarmPool) time.Duration {
		bytes := make([]int64, nodes)
		for _, pool := range window {
			spread := 1
			if !s.Colocate {
				spread = min(max(1, pool.Replicas), nodes)
			}
			for k := range spread {
				n := (next + k) % nodes
				for _, l := range byName[pool.Image].layersOr(m.ImageBytes) {
					if !held[n][l.Digest] {
						held[n][l.Digest] = true
						bytes[n] += l.Size
					}
				}
			}
			next = (next + 1) % nodes
		}
		return seconds(float64(slices.Max(bytes)) / bandwidth)
	}
	var e Estimate
	pulls := make([]time.Duration, len(s.Windows))
	for i, w := range s.Windows {
		pulls[i] = pullOf(w)
		e.Pull += pulls[i]
	}
	// Each window's tasks run in waves of the concurrency: a window of
	// fewer tasks runs fewer at once.
	tasks := 0
	for _, w := range s.Windows {
		n := 0
		for _, pool := range w {
			n += pool.Tasks
		}
		n *= max(1, s.Epochs)
		tasks += n
		e.Tasks += time.Duration((n+s.Concurrency-1)/max(1, s.Concurrency)) * m.TaskTime
	}
	if m.ClaimsPerSecond > 0 {
		e.Claims = seconds(float64(tasks) / m.ClaimsPerSecond)
	}
	run, runBound := e.Tasks, "tasks"
	if e.Claims > run {
		run, runBound = e.Claims, "control-plane"
	}
	// A strategy that warms ahead pulls the next window while one runs:
	// only the first window's pull is not hidden behind tasks.
	strategy, _ := config.StrategyNamed(s.Strategy)
	switch {
	case strategy.Ahead && len(s.Windows) > 0:
		first := pulls[0]
		e.Wall = first + max(e.Pull-first, run)
		e.Bound = runBound
		if e.Pull-first > run {
			e.Bound = "pull"
		}
	default:
		e.Wall = e.Pull + run
		e.Bound = runBound
		if e.Pull > run {
			e.Bound = "pull"
		}
	}
	return e
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Second)
}

// Bottleneck names what bounds an estimate: pull bandwidth, the control
// plane's create rate, or, when the tasks' waves do, what keeps the
// concurrency down — cpu, memory, pods, image-disk (the window the disk
// allows), or none when every task runs at once.
func Bottleneck(e Estimate, concurrency, tasks int, limitedBy string) string {
	switch {
	case e.Bound == "pull":
		return "pull bandwidth"
	case e.Bound == "control-plane":
		return "control plane"
	case limitedBy == "image disk":
		return limitedBy
	case concurrency >= tasks:
		return "none"
	}
	return limitedBy
}

// Bytes writes a size readably: GiB to a tenth from 1 GiB, else MiB.
func Bytes(b int64) string {
	if b >= GiB {
		return strconv.FormatFloat(float64(b)/GiB, 'f', 1, 64) + " GiB"
	}
	return strconv.FormatInt(b>>20, 10) + " MiB"
}
