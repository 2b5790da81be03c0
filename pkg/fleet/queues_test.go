package fleet

import (
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// A task whose node went goes to the least loaded node still there that
// runs its image, or else to the least loaded of all; none when every
// node went.
func TestTarget(t *testing.T) {
	node := func(hostname string, load int, dropped bool) *nodeQueue {
		return &nodeQueue{plannedNode: plannedNode{hostname: hostname}, load: load, dropped: dropped}
	}
	for _, tc := range []struct {
		name  string
		nodes []*nodeQueue
		on    []string
		want  string
	}{
		{"a node that runs the image, though busier", []*nodeQueue{node("a", 1, false), node("b", 5, false)}, []string{"b"}, "b"},
		{"the least loaded of those that run it", []*nodeQueue{node("a", 4, false), node("b", 2, false), node("c", 0, false)}, []string{"a", "b"}, "b"},
		{"none that runs it is left: the least loaded", []*nodeQueue{node("a", 3, true), node("b", 2, false), node("c", 1, false)}, []string{"a"}, "c"},
		{"ties go to the first", []*nodeQueue{node("a", 1, false), node("b", 1, false)}, nil, "a"},
		{"every node went", []*nodeQueue{node("a", 0, true)}, []string{"a"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if n := (&queued{nodes: tc.nodes}).target(tc.on); n != nil {
				got = n.hostname
			}
			if got != tc.want {
				t.Errorf("target %q, want %q", got, tc.want)
			}
		})
	}
}

// The pools count each image's tasks to their last, and all of them; the
// tasks that leave the queues count too.
func TestQueuedPools(t *testing.T) {
	p := newQueuedPools([][]tasks.Task{{{ID: "1", Image: "a"}, {ID: "2", Image: "b"}}, {{ID: "3", Image: "a"}}})
	if !p.runs("a") || p.runs("c") {
		t.Error("runs: want a, not c")
	}
	if p.done("a") {
		t.Error("the first of a's two done was taken for the last")
	}
	p.forget([]tasks.Task{{ID: "2", Image: "b"}})
	p.forget(nil)
	select {
	case <-p.all:
		t.Error("all is closed while a task of a is left")
	default:
	}
	if !p.done("a") {
		t.Error("a's second done was not the last")
	}
	select {
	case <-p.all:
	default:
		t.Error("all is not closed once every task is done")
	}
	if empty := newQueuedPools(nil); empty.runs("a") {
		t.Error("no queues run a")
	} else {
		<-empty.all
		empty.forget(nil)
	}
}
