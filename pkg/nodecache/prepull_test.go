package nodecache

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

func TestAdmit(t *testing.T) {
	const gi = 1 << 30
	fs := func(availableGi int64) v1alpha1.ImageFilesystem {
		return v1alpha1.ImageFilesystem{CapacityBytes: 100 * gi, AvailableBytes: availableGi * gi}
	}
	for _, tt := range []struct {
		name      string
		fs        v1alpha1.ImageFilesystem
		highWater int32
		r         Reservations
		want      Decision
		says      string
	}{
		{"under the mark", fs(30), 80, Reservations{}, Start, ""},
		{"at the mark", fs(20), 80, Reservations{}, Stop, "80% full (80Gi of 100Gi), at or past the high-water mark of 80% (the job's, within the agent's --max-high-water)"},
		{"full", fs(0), 100, Reservations{}, Stop, "100% full"},
		{"size unseen", v1alpha1.ImageFilesystem{UsedBytes: 50 * gi}, 99, Reservations{}, Stop, "cannot be checked: the agent cannot see the image filesystem's size (give the agent --image-fs-path"},
		{"beside a pull of unknown size", fs(30), 80, Reservations{InFlight: 1}, Wait, ""},
		{"beside pulls that fit", fs(30), 80, Reservations{InFlight: 2, Estimate: 3 * gi}, Start, ""},
		{"beside pulls that would pass the mark", fs(30), 80, Reservations{InFlight: 2, Estimate: 4 * gi}, Wait, ""},
		{"pulls under way reach the mark", fs(30), 80, Reservations{InFlight: 2, Estimate: 5 * gi}, Wait, ""},
		{"the last image alone may pass the mark", fs(21), 80, Reservations{Estimate: 5 * gi}, Start, ""},
	} {
		a := Admit(tt.fs, tt.highWater, tt.r)
		if a.Decision != tt.want || !strings.Contains(a.Why, tt.says) || (tt.says == "") != (a.Why == "") {
			t.Errorf("%s: Admit = %+v, want %v saying %q", tt.name, a, tt.want, tt.says)
		}
	}
}

func TestProgressStatus(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		steps  func(p *NodeProgress)
		phase  v1alpha1.PrepullPhase
		counts [4]int32 // pulled, present, failed, pending
		says   string
	}{
		{"nothing done yet", func(*NodeProgress) {}, v1alpha1.PrepullPulling, [4]int32{0, 0, 0, 3}, ""},
		{"some pulled", func(p *NodeProgress) { p.state["a"] = statePulled; p.state["b"] = statePresent },
			v1alpha1.PrepullPulling, [4]int32{1, 1, 0, 1}, ""},
		{"all on the node", func(p *NodeProgress) {
			p.state["a"], p.state["b"], p.state["c"] = statePulled, statePresent, statePulled
		}, v1alpha1.PrepullSucceeded, [4]int32{2, 1, 0, 0}, ""},
		{"one failed", func(p *NodeProgress) {
			p.state["a"], p.state["b"] = statePulled, statePulled
			p.Fail("c", "not found")
		}, v1alpha1.PrepullFailed, [4]int32{2, 0, 1, 0}, "1 of 3 images failed to pull"},
		{"stopped by the budget", func(p *NodeProgress) {
			p.state["a"] = statePulled
			p.stopped = "the image filesystem is 90% full"
		}, v1alpha1.PrepullStopped, [4]int32{1, 0, 0, 2}, "90% full"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := NewNodeProgress([]string{"a", "b", "c", "a"})
			tt.steps(p)
			s := p.Status("node-a", now)
			got := [4]int32{s.Pulled, s.Present, s.Failed, s.Pending}
			if s.Phase != tt.phase || got != tt.counts || !strings.Contains(s.Message, tt.says) || s.Node != "node-a" || !s.UpdateTime.Time.Equal(now) {
				t.Errorf("status %+v, want %s with counts %v saying %q", s, tt.phase, tt.counts, tt.says)
			}
			if Final(s) == (tt.phase == v1alpha1.PrepullPulling) {
				t.Errorf("Final(%s) = %v", s.Phase, Final(s))
			}
		})
	}
}

// A node lists its first failures only; the counts say how many.
func TestProgressListsFewFailures(t *testing.T) {
	var images []string
	for i := range 50 {
		images = append(images, fmt.Sprintf("img-%d", i))
	}
	p := NewNodeProgress(images)
	for _, img := range images {
		p.Fail(img, "not found")
	}
	s := p.Status("node-a", time.Now())
	if s.Failed != 50 || len(s.Failures) != maxFailuresListed {
		t.Errorf("%d failed, %d listed; want 50 and %d", s.Failed, len(s.Failures), maxFailuresListed)
	}
}

func TestJobProgress(t *testing.T) {
	job := &v1alpha1.PrepullJob{Spec: v1alpha1.PrepullJobSpec{Images: []string{"a", "b", "c"}},
		Status: v1alpha1.PrepullJobStatus{Nodes: []v1alpha1.NodePrepullStatus{
			{Node: "n1", Phase: v1alpha1.PrepullSucceeded, Pulled: 2, Present: 1},
			{Node: "n2", Phase: v1alpha1.PrepullPulling, Pulled: 1, Pending: 2},
			{Node: "n3", Phase: v1alpha1.PrepullStopped, Pulled: 1, Pending: 2, Message: "90% full"},
			{Node: "gone", Phase: v1alpha1.PrepullFailed, Failed: 3},
		}}}
	p := Progress(job, []string{"n3", "n1", "n2", "n4", "n1"})
	names := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		names[i] = n.Node
	}
	if strings.Join(names, ",") != "n1,n2,n3,n4" {
		t.Errorf("nodes %v, want the targets once each, by name", names)
	}
	if p.Pulled != 4 || p.Present != 1 || p.Failed != 0 || p.Pending != 7 || p.Done != 2 || p.Succeeded != 1 || p.Finished() {
		t.Errorf("progress %+v", p)
	}
	if n4 := p.Nodes[3]; n4.Phase != v1alpha1.PrepullPulling || n4.Pending != 3 || !strings.Contains(n4.Message, "not started") {
		t.Errorf("a node without an entry: %+v", n4)
	}
	done := Progress(job, []string{"n1", "n3"})
	if !done.Finished() || done.Succeeded != 1 {
		t.Errorf("n1 and n3 are final: %+v", done)
	}
}

func TestDeleteAt(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	entry := func(node string, phase v1alpha1.PrepullPhase, at time.Duration) v1alpha1.NodePrepullStatus {
		return v1alpha1.NodePrepullStatus{Node: node, Phase: phase, UpdateTime: metav1.NewTime(t0.Add(at))}
	}
	ttl := int32(60)
	finished := []v1alpha1.NodePrepullStatus{
		entry("n2", v1alpha1.PrepullSucceeded, 30*time.Second),
		entry("n1", v1alpha1.PrepullFailed, 10*time.Second),
		entry("n3", v1alpha1.PrepullStopped, 20*time.Second),
	}
	tests := []struct {
		name  string
		ttl   *int32
		nodes []v1alpha1.NodePrepullStatus
		node  string
		want  time.Duration // after t0
		ok    bool
	}{
		{"no TTL", nil, finished, "n1", 0, false},
		{"first node by name deletes at the TTL after the last finished", &ttl, finished, "n1", 90 * time.Second, true},
		{"the next node waits its turn", &ttl, finished, "n3", 90*time.Second + 2*DeleteStagger, true},
		{"a node that took no part does not delete", &ttl, finished, "n4", 0, false},
		{"a node still pulling", &ttl, append(finished[:2:2], entry("n3", v1alpha1.PrepullPulling, 0)), "n1", 0, false},
		{"no entries", &ttl, nil, "n1", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &v1alpha1.PrepullJob{Spec: v1alpha1.PrepullJobSpec{TTLSecondsAfterFinished: tt.ttl},
				Status: v1alpha1.PrepullJobStatus{Nodes: tt.nodes}}
			at, ok := DeleteAt(job, tt.node)
			if ok != tt.ok || ok && !at.Equal(t0.Add(tt.want)) {
				t.Errorf("DeleteAt = %v, %v; want %v, %v", at, ok, t0.Add(tt.want), tt.ok)
			}
		})
	}
}

// A high-water mark is a percentage; the default is one.
func TestCheckHighWater(t *testing.T) {
	for _, tt := range []struct {
		percent int32
		ok      bool
	}{{DefaultHighWaterPercent, true}, {1, true}, {100, true}, {0, false}, {101, false}, {-5, false}} {
		if err := CheckHighWater(tt.percent); (err == nil) != tt.ok {
			t.Errorf("CheckHighWater(%d) = %v, want ok %v", tt.percent, err, tt.ok)
		}
	}
}
