package e2e

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// A sandbox waiting for its image shows how far the pull is: the agent
// patches containerd's ingests into its node's NodeImageCache while the
// pull goes, with their sum in an annotation; describe run and get claims
// -o wide match them to the image's layers, read from its registry, the
// run's progress counts the annotation of its waiting Pod's node, and the
// pulls are cleared once it is done. The loopback registry serves repositories under slow/ at 4 MiB/s,
// so the 24 MiB layer takes seconds to come (e2e/kind's registry too).
func TestPullInProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n := theNode(t)
	n.agent.Start(t, ctx)
	pullInProgress(t, ctx, n)
}

func pullInProgress(t *testing.T, ctx context.Context, n *sandboxNode) {
	const runID = "e2e-pulls"
	node := n.name
	// By the registry's own address, so that the plugin reads the image's
	// layers from it as it would from any registry.
	ref, _ := n.pushImage(t, ctx, n.registry+"/sandbox-fleet/slow/pull", 24<<20)
	task := tasks.Task{ID: "task-1", Image: ref}
	clients, f := openFleet(t, ctx, runID, []tasks.Task{task}, func(cfg *config.Fleet) {
		cfg.Template.NodeSelector = map[string]string{corev1.LabelHostname: node}
	})
	ns := clients.Namespace
	waitForCache(t, ctx, clients, node, func(*v1alpha1.NodeImageCache) bool { return true })
	warmed := make(chan error, 1)
	go func() { warmed <- f.Warm(ctx, []string{ref}, replicas(1)) }()

	cache := waitForCache(t, ctx, clients, node, func(c *v1alpha1.NodeImageCache) bool {
		for _, p := range c.Pulls {
			if p.Done < p.Size && p.Size > 20<<20 {
				return true
			}
		}
		return false
	})
	t.Logf("pulls on %s: %+v", node, cache.Pulls)
	// A claim made while its sandbox pulls (the pool is the fleet's from
	// the moment Warm creates it) shows the pull in get claims -o wide.
	acquired := make(chan error, 1)
	go func() {
		_, err := f.Acquire(ctx, task, nil)
		acquired <- err
	}()
	// The whole image is known (busybox's layer and the 24 MiB one), and
	// how much of it the node has.
	pulling := regexp.MustCompile(`pulling \d+\.\d/2[45]\.\d MiB \(\d+ MiB/s(, ~\d+s)?\)`)
	if sum, err := nodecache.ParsePulling(cache.Annotations[v1alpha1.PullingAnnotation]); err != nil || sum.Size < 20<<20 {
		t.Errorf("annotation %s = %+v, %v; want the pulls' sum", v1alpha1.PullingAnnotation, sum, err)
	}
	seen := map[string]bool{}
	for len(seen) < 3 && ctx.Err() == nil {
		// What run's progress line shows.
		if p := f.Progress().Pulling; p.Done < p.Size && p.Size > 20<<20 && !seen["progress"] {
			seen["progress"] = true
			t.Logf("progress: %s", p)
		}
		for _, args := range [][]string{{"describe", "run", runID, "-n", ns}, {"get", "claims", "-o", "wide", "-n", ns}} {
			code, out, stderr := plugin(args...)
			if code != 0 {
				t.Fatalf("%v: exit %d\n%s", args, code, stderr)
			}
			if m := pulling.FindString(out); m != "" && !seen[args[0]] {
				seen[args[0]] = true
				t.Logf("%v:\n%s", args, out)
			}
		}
		select {
		case err := <-acquired:
			t.Fatalf("the claim was Ready (%v) before describe run, get claims -o wide and the run's progress all showed its pull (%v)", err, seen)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := errors.Join(<-warmed, <-acquired); err != nil {
		t.Fatal(err)
	}
	waitForCache(t, ctx, clients, node, func(c *v1alpha1.NodeImageCache) bool {
		_, annotated := c.Annotations[v1alpha1.PullingAnnotation]
		return len(c.Pulls) == 0 && !annotated
	})
}
