package faults

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The driver signalled at a random moment of each stage of a run: SIGINT
// and SIGTERM make it tear its run down and exit; after SIGKILL, `reap
// --run-id` removes what it left. Either way the bystander run beside it
// keeps every sandbox and finishes.
func TestDriverSignalled(t *testing.T) {
	rng := seeded(t)
	stages := []struct {
		name    string
		reached func(t *testing.T, r *run) bool
	}{
		{"starting", func(_ *testing.T, r *run) bool { return strings.Contains(r.stderr.String(), "run "+r.id+":") }},
		{"warming", func(t *testing.T, r *run) bool { return len(podsOf(t, r.ns, r.id)) > 0 }},
		{"claiming", func(t *testing.T, r *run) bool { return claimsOf(t, r.ns, r.id) > 0 }},
		{"half done", func(t *testing.T, r *run) bool { return r.resultCount(t) >= r.tasks/2 }},
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		for _, stage := range stages {
			jitter := time.Duration(rng.Int64N(int64(time.Second)))
			t.Run(sig.String()+" "+stage.name, func(t *testing.T) {
				t.Parallel()
				ns := cluster.NewNamespace(t)
				by := startBystander(t, ns)
				r := startRun(t, ns, "signalled", 16, sleepWork)
				r.waitFor(t, stage.name, func() bool { return stage.reached(t, r) })
				time.Sleep(jitter)
				inject(t, "driver "+sig.String()+" while "+stage.name)
				if err := syscall.Kill(r.cmd.Process.Pid, sig); err != nil {
					t.Fatal(err)
				}
				if code := r.end(t); code == 0 && sig != syscall.SIGKILL {
					t.Errorf("a run stopped by %s exited 0:\n%s", sig, r.stderr)
				}
				r.checkResults(t, false)
				if sig == syscall.SIGKILL {
					out, err := exec.Command(buildPlugin(t), "--kubeconfig", cluster.Kubeconfig(), "reap", "-n", ns, "--run-id", r.id).CombinedOutput()
					if err != nil {
						t.Errorf("reap --run-id %s: %v\n%s", r.id, err, out)
					}
				} else if s := r.stderr.String(); !strings.Contains(s, "interrupted") {
					t.Errorf("a run stopped by %s does not say it was interrupted:\n%s", sig, s)
				}
				assertGone(t, ns, r.id)
				by.release(t, true)
			})
		}
	}
}
