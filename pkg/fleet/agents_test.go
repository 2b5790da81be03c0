package fleet

import (
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// A node's report: the first of each job's images its entry counts done,
// less those that failed, are held; it is pulling while an entry is
// Pulling with images to go; its sign changes with any entry's time.
func TestAgentReports(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	job := func(name string, images []string, entries ...v1alpha1.NodePrepullStatus) v1alpha1.PrepullJob {
		j := v1alpha1.PrepullJob{Spec: v1alpha1.PrepullJobSpec{Images: images}, Status: v1alpha1.PrepullJobStatus{Nodes: entries}}
		j.Name = name
		return j
	}
	jobs := []v1alpha1.PrepullJob{
		job("plan-a", []string{"a1", "a2", "a3", "a4"}, v1alpha1.NodePrepullStatus{Node: "a", Phase: v1alpha1.PrepullPulling,
			Pulled: 1, Present: 1, Failed: 1, Pending: 1, Failures: []v1alpha1.ImagePullFailure{{Image: "a2"}}, UpdateTime: t0}),
		job("moved-a", []string{"m1"}, v1alpha1.NodePrepullStatus{Node: "a", Phase: v1alpha1.PrepullSucceeded, Pulled: 1, UpdateTime: t0}),
		job("plan-b", []string{"b1", "b2"}, v1alpha1.NodePrepullStatus{Node: "b", Phase: v1alpha1.PrepullSucceeded, Pulled: 1, Present: 1, UpdateTime: t0}),
		// An entry that counts more than its job lists holds them all.
		job("plan-c", []string{"c1"}, v1alpha1.NodePrepullStatus{Node: "c", Phase: v1alpha1.PrepullPulling, Pulled: 2, Pending: 1, UpdateTime: t0}),
		job("not-started", []string{"d1"}),
	}
	got := agentReports(jobs)
	want := map[string]struct {
		pulling bool
		held    []string
	}{
		"a": {true, []string{"a1", "a3", "m1"}},
		"b": {false, []string{"b1", "b2"}},
		"c": {true, []string{"c1"}},
	}
	if len(got) != len(want) {
		t.Errorf("reports of %v, want of a, b and c", slices.Sorted(maps.Keys(got)))
	}
	for node, w := range want {
		r := got[node]
		if held := slices.Sorted(maps.Keys(r.held)); r.pulling != w.pulling || !slices.Equal(held, w.held) {
			t.Errorf("node %s: pulling %v, held %v; want %v, %v", node, r.pulling, held, w.pulling, w.held)
		}
	}
	later := slices.Clone(jobs)
	later[1] = job("moved-a", []string{"m1"}, v1alpha1.NodePrepullStatus{Node: "a", Phase: v1alpha1.PrepullSucceeded, Pulled: 1,
		UpdateTime: metav1.NewTime(t0.Add(time.Second))})
	if agentReports(later)["a"].sign == got["a"].sign {
		t.Error("a node's sign did not change when one of its entries was written again")
	}
}

// An agent has stopped when its node, pulling, has written nothing for
// the silence, by the run's clock; one that writes, or is done, has not.
func TestAgentWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pulling := func(sign string) agentReport { return agentReport{sign: sign, pulling: true} }
	type look struct {
		at      time.Duration
		r       agentReport
		ok      bool
		stopped bool
	}
	for _, tc := range []struct {
		name  string
		looks []look
	}{
		{"silent while pulling", []look{{0, pulling("1"), true, false}, {59 * time.Second, pulling("1"), true, false}, {60 * time.Second, pulling("1"), true, true}}},
		{"writes in time", []look{{0, pulling("1"), true, false}, {50 * time.Second, pulling("2"), true, false}, {100 * time.Second, pulling("2"), true, false}}},
		// An agent done pulling has nothing to report.
		{"done", []look{{0, pulling("1"), true, false}, {30 * time.Second, agentReport{sign: "2"}, true, false}, {120 * time.Second, agentReport{sign: "2"}, true, false}}},
		// One that never wrote is not known to have run: not stopped.
		{"never wrote", []look{{0, agentReport{}, false, false}, {120 * time.Second, agentReport{}, false, false}}},
		// Done, then pulling again (a job of moved tasks): counted anew.
		{"pulling again", []look{{0, pulling("1"), true, false}, {30 * time.Second, agentReport{sign: "2"}, true, false},
			{70 * time.Second, pulling("3"), true, false}, {120 * time.Second, pulling("3"), true, false}}},
	} {
		// No silence is the default minute: a config not from
		// config.Default must not take every pulling agent for stopped.
		w := newAgentWatch(0)
		for i, l := range tc.looks {
			if got := w.stopped("n", l.r, l.ok, t0.Add(l.at)); got != l.stopped {
				t.Errorf("%s: look %d at %v: stopped %v, want %v", tc.name, i, l.at, got, l.stopped)
			}
		}
	}
}
