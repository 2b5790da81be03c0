package plan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testobjects"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
)

// The probe's cluster: kwok node pools of four shapes, two nodes each, by
// the GKE pool label. Every pool but "cached" has room to spare in all but
// one resource.
var cluster *testcluster.Cluster

const poolLabel = "cloud.google.com/gke-nodepool"

func TestMain(m *testing.M) {
	roomy := func(change func(corev1.ResourceList)) corev1.ResourceList {
		c := corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("32"),
			corev1.ResourceMemory:           resource.MustParse("128Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
			corev1.ResourcePods:             resource.MustParse("110"),
		}
		if change != nil {
			change(c)
		}
		return c
	}
	var nodes []testcluster.Node
	for pool, capacity := range map[string]corev1.ResourceList{
		"cpu":  roomy(func(c corev1.ResourceList) { c[corev1.ResourceCPU] = resource.MustParse("2") }),
		"disk": roomy(nil),
		"pull": roomy(nil),
		"pods": roomy(func(c corev1.ResourceList) { c[corev1.ResourcePods] = resource.MustParse("5") }),
	} {
		nodes = append(nodes, testcluster.FakeNodes(pool, 2, capacity, map[string]string{poolLabel: pool})...)
	}
	testcluster.Main(m, &cluster, testcluster.WithNodes(nodes...))
}

// probeImages are a sweep's 40 SWE-bench-shaped images: a 3 GiB base, a
// 2 GiB environment per repository, 300 MiB per task instance.
func probeImages() map[string][]v1alpha1.Layer {
	images := map[string][]v1alpha1.Layer{}
	for r := range 4 {
		for i := range 10 {
			images[fmt.Sprintf("docker.io/swebench/repo-%d:instance-%d", r, i)] = []v1alpha1.Layer{
				{Digest: "00000000000000ba", Size: 3 << 30},
				{Digest: fmt.Sprintf("%016x", 0xe0+r), Size: 2 << 30},
				{Digest: fmt.Sprintf("%016x", 0x1000+10*r+i), Size: 300 << 20},
			}
		}
	}
	return images
}

// TestProbeShapes golden-tests plan --probe on each pool: the cpu pool's
// nodes hold every image and bound the run by CPU; the disk pool's image
// filesystems hold few images at once; the pull pool holds none and pulls
// slowly; the pods pool fits few Pods.
func TestProbeShapes(t *testing.T) {
	ctx := context.Background()
	clients, err := cluster.Clients("default")
	if err != nil {
		t.Fatal(err)
	}
	images := probeImages()
	fs := map[string]int64{"cpu": 500 << 30, "disk": 10 << 30, "pull": 500 << 30, "pods": 500 << 30}
	for _, pool := range []string{"cpu", "disk", "pull", "pods"} {
		for i := range 2 {
			held := map[string][]v1alpha1.Layer{}
			if pool == "cpu" || pool == "pods" {
				held = images
			}
			nic := testobjects.NodeImageCache(fmt.Sprintf("%s-%d", pool, i), held)
			nic.ImageFilesystem.CapacityBytes = fs[pool]
			if err := clients.Client.Create(ctx, nic); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	var rows strings.Builder
	for _, name := range slices.Sorted(maps.Keys(images)) {
		id := strings.ReplaceAll(strings.TrimPrefix(name, "docker.io/swebench/"), ":", "__")
		fmt.Fprintf(&rows, "{\"instance_id\": %q, \"image\": %q}\n", id, name)
	}
	tasksFile := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(tasksFile, []byte(rows.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		pool  string
		model []string
		want  string
	}{
		{"cpu", []string{"--task-time", "5m"}, "cpu"},
		{"disk", []string{"--task-time", "10m", "--pull-bandwidth", "1Gi"}, "image disk"},
		{"pull", []string{"--task-time", "30s", "--pull-bandwidth", "50Mi"}, "pull bandwidth"},
		{"pods", []string{"--task-time", "5m"}, "pods"},
	} {
		t.Run(tt.pool, func(t *testing.T) {
			config := filepath.Join(dir, tt.pool+".yaml")
			if err := os.WriteFile(config, []byte(fmt.Sprintf(
				"apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\ntemplate:\n  nodeSelector:\n    %s: %s\n", poolLabel, tt.pool)), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"plan", "--kubeconfig", cluster.Kubeconfig(), "-f", config, "--tasks", tasksFile, "--probe", "-q"}, tt.model...)
			golden.Assert(t, "probe-"+tt.pool, execute(t, args...))

			if tt.pool == "cpu" {
				// Without --probe, the plan as configured, and how it
				// compares.
				plain := []string{"plan", "--kubeconfig", cluster.Kubeconfig(), "-f", config, "--tasks", tasksFile, "-q", "--task-time", "5m"}
				golden.Assert(t, "compared-cpu", execute(t, plain...))
			}
			var recs []fleet.Recommendation
			if err := json.Unmarshal([]byte(execute(t, append(args, "-o", "json")...)), &recs); err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].Chosen.Bottleneck != tt.want {
				t.Errorf("the %s pool's bottleneck: %+v, want %s", tt.pool, recs, tt.want)
			}
		})
	}
}
