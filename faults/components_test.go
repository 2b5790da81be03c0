package faults

import (
	"context"
	"testing"
	"time"
)

// The cluster's own components, frozen or killed and restarted at a
// random moment of a stage of a run, with a second run beside it in the
// namespace: both end within the bound, their tasks succeed or fail for
// the infrastructure, and neither leaves anything.
func TestComponentFaults(t *testing.T) {
	rng := seeded(t)
	freeze := func(name string, d time.Duration) func(t *testing.T) {
		return func(t *testing.T) {
			p := cluster.Component(name)
			if err := p.Freeze(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := p.Thaw(); err != nil {
					t.Error(err)
				}
			}()
			time.Sleep(d)
		}
	}
	restart := func(name string) func(t *testing.T) {
		return func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := cluster.Restart(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	warming := func(t *testing.T, r *run) bool { return len(podsOf(t, r.ns, r.id)) > 0 }
	claiming := func(t *testing.T, r *run) bool { return claimsOf(t, r.ns, r.id) > 0 }
	halfDone := func(t *testing.T, r *run) bool { return r.resultCount(t) >= r.tasks/2 }
	for _, tt := range []struct {
		fault   string
		stage   string
		reached func(*testing.T, *run) bool
		inject  func(*testing.T)
	}{
		// Longer than the grace, so that nothing given up early passes.
		{"Agent Sandbox controller frozen 12s", "warming", warming, freeze("agent-sandbox-controller", 12*time.Second)},
		{"Agent Sandbox controller frozen 12s", "claiming", claiming, freeze("agent-sandbox-controller", 12*time.Second)},
		{"Agent Sandbox controller killed and restarted", "warming", warming, restart("agent-sandbox-controller")},
		{"Agent Sandbox controller killed and restarted", "claiming", claiming, restart("agent-sandbox-controller")},
		{"kube-apiserver frozen 10s", "claiming", claiming, freeze("kube-apiserver", 10*time.Second)},
		{"kube-apiserver frozen 10s", "half done", halfDone, freeze("kube-apiserver", 10*time.Second)},
		{"kube-apiserver killed and restarted", "claiming", claiming, restart("kube-apiserver")},
		{"kube-apiserver killed and restarted", "half done", halfDone, restart("kube-apiserver")},
		{"kwok (every node) frozen 10s", "warming", warming, freeze("kwok", 10*time.Second)},
		{"kube-scheduler killed and restarted", "warming", warming, restart("kube-scheduler")},
	} {
		jitter := time.Duration(rng.Int64N(int64(500 * time.Millisecond)))
		t.Run(tt.fault+" while "+tt.stage, func(t *testing.T) {
			ns := cluster.NewNamespace(t)
			beside := startRun(t, ns, "beside", 12, sleepWork)
			r := startRun(t, ns, "faulted", 12, sleepWork)
			r.waitFor(t, tt.stage, func() bool { return tt.reached(t, r) })
			time.Sleep(jitter)
			inject(t, tt.fault+" while "+tt.stage)
			tt.inject(t)
			for _, run := range []*run{r, beside} {
				if code := run.end(t); code != 0 && code != 1 {
					t.Errorf("run %s exit %d:\n%s", run.id, code, run.stderr)
				}
				run.checkResults(t, true)
				assertGone(t, ns, run.id)
			}
		})
	}
}
