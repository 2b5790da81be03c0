package faults

import (
	"context"
	"flag"
	"fmt"
	"testing"

	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// A run's objects deleted behind its back, one at a time while tasks hold
// them: a sandbox Pod (the task's sandbox is lost) and a claim (deleted by
// another client). The run goes on, each hit task fails for the
// infrastructure or succeeds, and nothing is left.
func TestObjectsDeleted(t *testing.T) {
	for _, kind := range []string{"sandbox Pod", "claim"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ns := cluster.NewNamespace(t)
			by := startBystander(t, ns)
			r := startRun(t, ns, "deleted", 16, "sleep 2")
			c := clients(t, ns).Client
			for i := range 4 {
				r.waitFor(t, "a claimed sandbox", func() bool { return claimsOf(t, ns, r.id) > 0 })
				var victim client.Object
				if kind == "claim" {
					claims := &extensionsv1beta1.SandboxClaimList{}
					if err := c.List(context.Background(), claims, client.InNamespace(ns), client.MatchingLabels{labels.RunID: r.id}); err != nil {
						t.Fatal(err)
					}
					if len(claims.Items) == 0 {
						continue
					}
					victim = &claims.Items[0]
				} else {
					var claimed []client.Object
					for _, p := range podsOf(t, ns, r.id) {
						if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
							claimed = append(claimed, &p)
						}
					}
					if len(claimed) == 0 {
						continue
					}
					victim = claimed[0]
				}
				inject(t, fmt.Sprintf("%s %s deleted by another client (%d of 4)", kind, victim.GetName(), i+1))
				if err := client.IgnoreNotFound(c.Delete(context.Background(), victim)); err != nil {
					t.Fatal(err)
				}
				done := r.resultCount(t)
				r.waitFor(t, "a task to end after the deletion", func() bool { return r.resultCount(t) > done })
			}
			if code := r.end(t); code != 0 && code != 1 {
				t.Errorf("exit %d:\n%s", code, r.stderr)
			}
			r.checkResults(t, true)
			assertGone(t, ns, r.id)
			by.release(t, true)
		})
	}
}

// The suite as a whole injects at least minFaults faults, the real node's
// counted in e2e. This test runs last: Go runs a package's tests in the
// order of its files' names, and this file's sorts last.
func TestFaultCount(t *testing.T) {
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		t.Skip("only part of the suite ran")
	}
	if n := injected.Load(); n < minFaults-e2eFaults {
		t.Errorf("the kwok suite injected %d faults, want at least %d (and e2e %d more)", n, minFaults-e2eFaults, e2eFaults)
	}
}

// e2eFaults is how many faults e2e/faults_test.go injects on the real node.
const e2eFaults = 3
