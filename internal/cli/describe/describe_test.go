package describe

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testobjects"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/controllerwatch"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func TestDescribeRun(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	inv := &inventory.Inventory{}
	run := testobjects.MakeRun(inv, "rl", "run-a", now.Add(-10*time.Minute)).
		Pool("run-a-busybox-0a1b2c", "docker.io/library/busybox:1.36", 2, "", "node-1", "node-2").
		Pool("run-a-calc-3d4e5f", "docker.io/swebench/calc-1:latest", 2, "ImagePullBackOff", "node-2", "").
		Claim("run-a-task-1", "task-1", "run-a-busybox-0a1b2c", 1).
		Claim("run-a-task-2", "task-2", "run-a-calc-3d4e5f", 4).
		PullingPool("run-a-big-6a7b8c", "docker.io/swebench/big-1:latest", "node-1").
		Claim("run-a-task-3", "task-3", "run-a-big-6a7b8c", 5)
	inv.Pulls = map[types.NamespacedName]nodecache.Pull{
		{Namespace: "rl", Name: "run-a-big-6a7b8c-5"}: {Done: 2254857830, Size: 5690831667, BytesPerSecond: 180 << 20}}
	events := []corev1.Event{
		run.Event("Pod", "run-a-calc-3d4e5f-4", "Warning", "Failed", "Failed to pull image \"docker.io/swebench/calc-1:latest\":\n not found", now.Add(-time.Minute)),
		run.Event("SandboxWarmPool", "run-a-busybox-0a1b2c", "Normal", "Created", "created sandbox run-a-busybox-0a1b2c-1", now.Add(-9*time.Minute)),
		run.Event("Pod", "someone-elses-pod", "Warning", "Failed", "not about this run", now),
	}
	down := controllerwatch.State{Down: true, Since: now.Add(-40 * time.Second)}
	for _, tt := range []struct {
		golden     string
		inv        *inventory.Inventory
		events     []corev1.Event
		controller controllerwatch.State
	}{
		{"run", inv, events, down},
		{"run-empty-sections", &inventory.Inventory{Templates: inv.Templates[:1]}, nil, controllerwatch.State{}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			var out bytes.Buffer
			if err := Run(&out, tt.inv.Runs().Items[0], tt.inv, tt.events, tt.controller, now); err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, "describe-"+tt.golden, out.String())
		})
	}
}
