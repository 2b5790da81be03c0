package fleet_test

import (
	"errors"
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// A plan is decided from plain data before anything is created: here
// six tasks over three images, pipelined at a concurrency of 4.
func ExampleNewPlan() {
	cfg := config.Default()
	cfg.Strategy, cfg.MaxConcurrent, cfg.WindowSize = "pipelined", 4, 1
	var ts []tasks.Task
	for _, img := range []string{"example.com/a:1", "example.com/b:1", "example.com/c:1"} {
		for i := range 2 {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("%s-%d", img[12:13], i), Image: img})
		}
	}
	plan := fleet.NewPlan(cfg, ts)
	fmt.Println(plan.Strategy, "windows:", len(plan.Windows), "claims:", plan.Claims)
	// Output: pipelined windows: 3 claims: 6
}

// Interleave spreads each image's tasks over the order, in proportion to
// its share of them.
func ExampleInterleave() {
	ts := []tasks.Task{{ID: "a1", Image: "a"}, {ID: "a2", Image: "a"}, {ID: "a3", Image: "a"}, {ID: "a4", Image: "a"}, {ID: "b1", Image: "b"}, {ID: "b2", Image: "b"}}
	for _, t := range fleet.Interleave(ts) {
		fmt.Print(t.ID, " ")
	}
	fmt.Println()
	// Output: a1 b1 a2 a3 b2 a4
}

// A command's error says when the sandbox went under it: a trainer masks
// such a rollout out of the loss, or runs it again on another sandbox,
// rather than scoring the policy for it.
func ExampleLostError() {
	// What Sandbox.Exec returns when the sandbox's Pod is deleted under
	// the command, wrapped as a caller may wrap it.
	err := fmt.Errorf("rollout 3: %w", &fleet.LostError{TaskID: "django-11099", Pod: "pool-abc12", Why: "it is being deleted"})
	var lost *fleet.LostError
	if errors.As(err, &lost) {
		fmt.Printf("task %s: run it again on another sandbox (%s)\n", lost.TaskID, lost.Why)
	}
	// Output: task django-11099: run it again on another sandbox (it is being deleted)
}
