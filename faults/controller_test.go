package faults

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// The Agent Sandbox controller killed while a run claims, and not started
// again by the cluster: within 30 s the run's progress line names it, and
// describe run says so.
// Started again within the run's controller grace, the run finishes with
// every task done; left down, the tasks waiting for a sandbox end as
// infrastructure failures (reason controller) within the grace — well
// before the ready timeout — and the run exits 1 leaving nothing.
func TestControllerDown(t *testing.T) {
	const controller = "agent-sandbox-controller"
	for _, tt := range []struct {
		name  string
		back  bool
		grace time.Duration
	}{
		{"started again within the grace", true, 2 * time.Minute},
		{"left down", false, 20 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := cluster.NewNamespace(t)
			// A hold keeps the first tasks in their sandboxes, so that
			// the rest wait for claims while the controller is down.
			dir := t.TempDir()
			hold := filepath.Join(dir, "hold")
			if err := os.WriteFile(hold, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r := startRun(t, ns, "controller", 12, holdWork(dir), "-q=false", "--progress-interval", "1s",
				"--controller-grace", tt.grace.String(), "--ready-timeout", "10m")
			r.waitFor(t, "claiming", func() bool { return claimsOf(t, ns, r.id) >= 4 })
			inject(t, "Agent Sandbox controller killed, "+tt.name)
			if err := cluster.Kill(controller); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := cluster.Restart(ctx, controller); err != nil {
					t.Error(err)
				}
			})
			if err := os.Remove(hold); err != nil {
				t.Fatal(err)
			}
			r.waitFor(t, "the progress line to name the controller", func() bool {
				return strings.Contains(r.stderr.String(), "Agent Sandbox controller down")
			})
			if d := time.Since(killed); d > 30*time.Second {
				t.Errorf("the progress line named the controller %s after it was killed, not within 30s", d.Round(time.Second))
			}
			out, err := exec.Command(buildPlugin(t), "--kubeconfig", cluster.Kubeconfig(), "describe", "run", r.id, "-n", ns).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Agent Sandbox controller down for") {
				t.Errorf("describe run %s with the controller down (%v) does not say so:\n%s", r.id, err, out)
			}
			if tt.back {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := cluster.Restart(ctx, controller); err != nil {
					t.Fatal(err)
				}
			}
			code := r.end(t)
			if want := "The Agent Sandbox controller is down"; !strings.Contains(r.stderr.String(), want) {
				t.Errorf("the run's log does not say %q:\n%s", want, r.stderr)
			}
			ok, infra := r.checkResults(t, true)
			ended := time.Since(killed)
			if tt.back {
				if code != 0 || ok != r.tasks {
					t.Errorf("run with its controller back: exit %d, %d of %d tasks done:\n%s", code, ok, r.tasks, r.stderr)
				}
			} else {
				if code != 1 || infra == 0 {
					t.Errorf("run with its controller down: exit %d, %d tasks failed for the infrastructure; want exit 1 and some:\n%s", code, infra, r.stderr)
				}
				for _, res := range r.results(t) {
					if !res.OK && res.Reason != verdict.Controller {
						t.Errorf("task %s failed for %q, not for the controller: %s", res.ID, res.Reason, res.Error)
					}
				}
				// Lease expiry (15 s), the grace, teardown: far less
				// than the ten-minute ready timeout.
				if limit := 15*time.Second + tt.grace + time.Minute; ended > limit {
					t.Errorf("the run ended %s after its controller was killed, more than %s", ended.Round(time.Second), limit)
				}
			}
			assertGone(t, ns, r.id)
		})
	}
}
