package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testregistry"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/placement"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// skewed is a 40-task batch over 8 images, most tasks on a few images, as
// RL batches and benchmark subsets are.
func skewed() []tasks.Task {
	var ts []tasks.Task
	for i, n := range []int{12, 8, 6, 4, 4, 2, 2, 2} {
		for j := range n {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("img%d-task%d", i, j), Image: fmt.Sprintf("example.com/swe/img-%d:v1", i)})
		}
	}
	return ts
}

func testConfig(strategy string) config.Fleet {
	cfg := config.Default()
	cfg.Strategy = strategy
	cfg.MaxConcurrent = 8
	cfg.MaxWarmPoolSize = 4
	cfg.ReadyTimeout.Duration = time.Minute
	cfg.BreakerInterval.Duration = 200 * time.Millisecond
	return cfg
}

// open opens a fleet of cfg over ts on one namespace of each cluster.
func open(t *testing.T, ctx context.Context, runID string, cfg config.Fleet, ts []tasks.Task, clusters ...*testcluster.Cluster) *fleet.Fleet {
	t.Helper()
	var targets []fleet.Target
	for i, c := range clusters {
		clients, err := c.Clients(c.NewNamespace(t))
		if err != nil {
			t.Fatal(err)
		}
		cc := config.Cluster{Name: fmt.Sprintf("c%d", i), Weight: 1}
		if i < len(cfg.Clusters) {
			cc = cfg.Clusters[i]
		}
		targets = append(targets, fleet.Target{Config: cc, Clients: clients})
	}
	f, err := fleet.Open(ctx, runID, cfg, ts, targets)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// collect runs f with no work and returns its results by task id.
func collect(t *testing.T, ctx context.Context, f *fleet.Fleet) map[string]fleet.Result {
	t.Helper()
	var mu sync.Mutex
	got := map[string]fleet.Result{}
	rep, err := f.Run(ctx, fleet.RunOptions{Work: fleet.NoWork, OnResult: func(r fleet.Result) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := got[r.ID]; dup {
			t.Errorf("task %s reported twice", r.ID)
		}
		if r.Started.IsZero() || r.Finished.Before(r.Started) {
			t.Errorf("task %s started %s and finished %s", r.ID, r.Started, r.Finished)
		}
		got[r.ID] = r
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TasksOK != len(f.Tasks()) || rep.TasksErr != 0 || rep.Claims != len(f.Tasks()) {
		t.Errorf("report: %d ok, %d failed, %d claims; want %d ok, no failures, one claim a task", rep.TasksOK, rep.TasksErr, rep.Claims, len(f.Tasks()))
	}
	return got
}

// assertEmpty fails unless nothing of the run, and no Sandbox at all, is
// left on f's clusters.
func assertEmpty(t *testing.T, ctx context.Context, f *fleet.Fleet) {
	t.Helper()
	left, err := f.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	for _, c := range f.Clusters() {
		sandboxes := &sandboxv1beta1.SandboxList{}
		if err := c.Clients.Client.List(ctx, sandboxes, client.InNamespace(c.Namespace())); err != nil {
			t.Fatal(err)
		}
		if len(sandboxes.Items) > 0 {
			t.Errorf("cluster %s: %d sandboxes left", c.Name, len(sandboxes.Items))
		}
	}
}

// Every strategy runs the skewed batch to the end, each task once on a
// sandbox of its own image, within the strategy's warm footprint, and
// leaves nothing behind.
func TestStrategies(t *testing.T) {
	ts := skewed()
	for _, strategy := range config.Strategies {
		t.Run(strategy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			f := open(t, ctx, "strategy-"+strategy, testConfig(strategy), ts, cluster)
			got := collect(t, ctx, f)
			for _, task := range ts {
				r, ok := got[task.ID]
				switch {
				case !ok:
					t.Errorf("task %s has no result", task.ID)
				case !r.OK || r.ExitCode == nil || r.Node == "" || r.Sandbox == "" || r.Cluster != "c0":
					t.Errorf("task %s: %+v", task.ID, r)
				}
			}
			assertEmpty(t, ctx, f)
		})
	}
}

// Two runs share a namespace; tearing one down midway leaves the other's
// pools and claims alone, and the other finishes.
func TestRunsAreIsolated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	target := []fleet.Target{{Config: config.Cluster{Name: "shared", Weight: 1}, Clients: clients}}
	ts := skewed()
	cfg := testConfig("naive")
	cfg.KeepWarm = true
	a, err := fleet.Open(ctx, "run-a", cfg, ts, target)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Run(ctx, fleet.RunOptions{Work: fleet.NoWork}); err != nil {
		t.Fatal(err)
	}
	// Run a kept its pools; run b now runs alongside and is torn down.
	b, err := fleet.Open(ctx, "run-b", testConfig("naive"), ts, target)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Run(ctx, fleet.RunOptions{Work: fleet.NoWork}); err != nil {
		t.Fatal(err)
	}
	assertGone := func(f *fleet.Fleet) []string {
		left, err := f.Leftovers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return left["shared"]
	}
	if left := assertGone(b); len(left) > 0 {
		t.Errorf("run b left %v", left)
	}
	pools := &extensionsv1beta1.SandboxWarmPoolList{}
	if err := clients.Client.List(ctx, pools, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pools.Items) != 8 {
		t.Errorf("run a's 8 kept pools: %d pools left after run b's teardown", len(pools.Items))
	}
	for _, p := range pools.Items {
		if p.Labels["sandbox-fleet.io/run-id"] != "run-a" {
			t.Errorf("pool %s of run %q", p.Name, p.Labels["sandbox-fleet.io/run-id"])
		}
	}
	if err := a.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	if left := assertGone(a); len(left) > 0 {
		t.Errorf("run a left %v", left)
	}
}

// A capacity-weighted fleet over two clusters places pools by weight,
// names each sandbox's cluster, and tears both down.
func TestTwoClusters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	second, err := testcluster.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the namespaces' own cleanups.
	t.Cleanup(func() {
		if err := second.Stop(t.Failed()); err != nil {
			t.Error(err)
		}
	})
	cfg := testConfig("naive")
	cfg.Placement = "capacity-weighted"
	cfg.MaxConcurrent = 16
	cfg.Clusters = []config.Cluster{{Name: "big", Weight: 3}, {Name: "small", Weight: 1}}
	var ts []tasks.Task
	for i := range 16 {
		ts = append(ts, tasks.Task{ID: fmt.Sprint(i), Image: fmt.Sprintf("example.com/img-%d:v1", i)})
	}
	f := open(t, ctx, "two-clusters", cfg, ts, cluster, second)
	got := collect(t, ctx, f)
	per := map[string]int{}
	for _, r := range got {
		per[r.Cluster]++
	}
	// 16 single-replica pools at weights 3:1.
	if per["big"] != 12 || per["small"] != 4 {
		t.Errorf("tasks per cluster %v, want big 12 and small 4", per)
	}
	assertEmpty(t, ctx, f)
}

// Image-affinity sends each image's pool to the node pool whose nodes
// hold most of it, by their NodeImageCaches; for an image no node lists,
// by its layers from its registry.
func TestImageAffinityFollowsNodeCaches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := v1alpha1.Layer{Digest: "00000000000000b0", Size: 3 << 30}
	own := func(n int) v1alpha1.Layer { return v1alpha1.Layer{Digest: fmt.Sprintf("%016x", n), Size: 300 << 20} }
	admin, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	// img-2 is only in a registry on loopback; a sibling sharing two of
	// its three layers is on the node the hash would not choose for it.
	img2, layers2 := testregistry.Start(t).PushRandom(t, "swe/img-2:v1")
	hashed, err := placement.ImageAffinity{}.Choose(img2, 1, []placement.Target{{Name: "pool-0"}, {Name: "pool-1"}})
	if err != nil {
		t.Fatal(err)
	}
	// kwok-node-0 holds img-1, kwok-node-1 img-0 (siblings on one base):
	// the other way round from where the hash alone would send them.
	caches := []*v1alpha1.NodeImageCache{
		{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0"}, Layers: []v1alpha1.Layer{base, own(1)},
			Images: []v1alpha1.CachedImage{{Names: []string{"example.com/swe/img-1:v1"}, Layers: []int32{0, 1}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-1"}, Layers: []v1alpha1.Layer{base, own(0)},
			Images: []v1alpha1.CachedImage{{Names: []string{"example.com/swe/img-0:v1"}, Layers: []int32{0, 1}}}},
	}
	sibling := caches[1-hashed]
	sibling.Layers = append(sibling.Layers, layers2[:2]...)
	sibling.Images = append(sibling.Images, v1alpha1.CachedImage{Names: []string{"example.com/swe/img-2-sibling:v1"}, Layers: []int32{2, 3}})
	createCaches(t, ctx, admin, caches)
	cfg := testConfig("naive")
	cfg.Placement = "image-affinity"
	cfg.Clusters = []config.Cluster{
		{Name: "pool-0", Weight: 1, NodeSelector: map[string]string{corev1.LabelHostname: "kwok-node-0"}},
		{Name: "pool-1", Weight: 1, NodeSelector: map[string]string{corev1.LabelHostname: "kwok-node-1"}},
	}
	var ts []tasks.Task
	for _, img := range []string{"example.com/swe/img-0:v1", "example.com/swe/img-0:v1", "example.com/swe/img-1:v1", "example.com/swe/img-1:v1", img2} {
		ts = append(ts, tasks.Task{ID: fmt.Sprintf("t%d", len(ts)), Image: img})
	}
	f := open(t, ctx, "image-affinity", cfg, ts, cluster, cluster)
	got := collect(t, ctx, f)
	for id, want := range map[string]string{"t0": "pool-1", "t1": "pool-1", "t2": "pool-0", "t3": "pool-0", "t4": fmt.Sprintf("pool-%d", 1-hashed)} {
		if got[id].Cluster != want {
			t.Errorf("task %s (%s) ran on %s, want %s, whose node holds most of its image", id, ts[id[1]-'0'].Image, got[id].Cluster, want)
		}
	}
	assertEmpty(t, ctx, f)
}

// Under pipelined, the run plans its pulls from the nodes' caches: each
// node's agent is asked for the images the node will run, in order (a
// PrepullJob selecting it by hostname), each pool's sandboxes must run on
// its planned node and the pool keeps none warm, the tasks run there, and
// the jobs go with the run.
func TestPlannedPulls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	layer := func(digest string, size int64) v1alpha1.Layer { return v1alpha1.Layer{Digest: digest, Size: size} }
	base, envA, envB := layer("00000000000000b0", 3<<30), layer("00000000000000ea", 2<<30), layer("00000000000000eb", 2<<30)
	// kwok-node-0 holds repository A's environment, kwok-node-1 B's.
	caches := []*v1alpha1.NodeImageCache{
		{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0"}, Layers: []v1alpha1.Layer{base, envA, layer("00000000000000a0", 300<<20), layer("00000000000000a1", 300<<20)},
			Images: []v1alpha1.CachedImage{{Names: []string{"example.com/swe/a:0"}, Layers: []int32{0, 1, 2}}, {Names: []string{"example.com/swe/a:1"}, Layers: []int32{0, 1, 3}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-1"}, Layers: []v1alpha1.Layer{base, envB, layer("00000000000000b0", 300<<20), layer("00000000000000b1", 300<<20)},
			Images: []v1alpha1.CachedImage{{Names: []string{"example.com/swe/b:0"}, Layers: []int32{0, 1, 2}}, {Names: []string{"example.com/swe/b:1"}, Layers: []int32{0, 1, 3}}}},
	}
	createCaches(t, ctx, admin, caches)
	want := map[string]string{"example.com/swe/a:0": "kwok-node-0", "example.com/swe/a:1": "kwok-node-0",
		"example.com/swe/b:0": "kwok-node-1", "example.com/swe/b:1": "kwok-node-1"}
	var ts []tasks.Task
	for _, img := range []string{"example.com/swe/b:0", "example.com/swe/a:0", "example.com/swe/b:1", "example.com/swe/a:1"} {
		for range 2 {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("t%d", len(ts)), Image: img})
		}
	}
	cfg := testConfig("pipelined")
	cfg.WindowSize = 2
	cfg.PlannedPulls = new(true)
	f := open(t, ctx, "planned-pulls", cfg, ts, cluster)
	c := f.Clusters()[0]
	var once sync.Once
	jobs := map[string][]string{}
	planned := map[string][]string{}
	warm := map[string]int32{}
	work := func(ctx context.Context, _ tasks.Task, _ *fleet.Sandbox) (fleet.Output, error) {
		var err error
		once.Do(func() {
			list := &v1alpha1.PrepullJobList{}
			if err = c.Clients.Client.List(ctx, list, client.InNamespace(c.Namespace())); err != nil {
				return
			}
			for _, j := range list.Items {
				jobs[j.Spec.NodeSelector[corev1.LabelHostname]] = j.Spec.Images
			}
			templates := &extensionsv1beta1.SandboxTemplateList{}
			if err = c.Clients.Client.List(ctx, templates, client.InNamespace(c.Namespace())); err != nil {
				return
			}
			for _, tmpl := range templates.Items {
				pod := tmpl.Spec.PodTemplate.Spec
				if a := pod.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
					planned[pod.Containers[0].Image] = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values
				}
			}
			pools := &extensionsv1beta1.SandboxWarmPoolList{}
			if err = c.Clients.Client.List(ctx, pools, client.InNamespace(c.Namespace())); err != nil {
				return
			}
			for _, p := range pools.Items {
				warm[p.Name] = *p.Spec.Replicas
			}
		})
		return fleet.Output{}, err
	}
	ran := runOK(t, ctx, f, work)
	if w := map[string][]string{"kwok-node-0": {"example.com/swe/a:0", "example.com/swe/a:1"}, "kwok-node-1": {"example.com/swe/b:0", "example.com/swe/b:1"}}; !reflect.DeepEqual(jobs, w) {
		t.Errorf("the nodes' PrepullJobs ask for %v, want %v", jobs, w)
	}
	for img, node := range want {
		if p, ok := planned[img]; ok && !reflect.DeepEqual(p, []string{node}) {
			t.Errorf("the sandboxes of %s must run on %v, want %s", img, p, node)
		}
	}
	if len(planned) == 0 {
		t.Error("no pool's sandboxes must run on a planned node")
	}
	for name, replicas := range warm {
		if replicas != 0 {
			t.Errorf("pool %s keeps %d sandboxes warm, want none: the agents' pulls warm the planned nodes", name, replicas)
		}
	}
	for _, task := range ts {
		if ran[task.ID] != want[task.Image] {
			t.Errorf("task %s (%s) ran on %q, want %s, its planned node", task.ID, task.Image, ran[task.ID], want[task.Image])
		}
	}
	// The run's PrepullJobs are among what it must not leave.
	assertEmpty(t, ctx, f)
}

// A planned node deleted mid-run: the tasks it had not done — those it
// ran, cut short — go to the other planned node, whose sandboxes' template
// then allows them there, and every task ends well; nothing is left. A
// planned node cordoned mid-run runs its tasks to the end, and the one
// it had not started goes to the other node.
func TestPlannedNodeGone(t *testing.T) {
	for _, how := range []string{"deleted", "cordoned", "agent-stopped"} {
		t.Run(how, func(t *testing.T) { plannedNodeGone(t, how) })
	}
}

// plannedNodeGone runs six tasks on two planned nodes, two slots each,
// and has one go as how says while it runs its first two: deleted, its
// three tasks move; cordoned, the one it has not started; its agent
// stopped, the one of an image it has not pulled, which the other node's
// agent is then asked to pull.
func plannedNodeGone(t *testing.T, how string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	node := testcluster.FakeNodes("planned-"+how, 1, testcluster.DefaultCapacity(), nil)
	gone := node[0].Name
	if err := cluster.AddNodes(ctx, node...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Kube.CoreV1().Nodes().Delete(context.Background(), gone, metav1.DeleteOptions{}) })
	layer := func(digest string, size int64) v1alpha1.Layer { return v1alpha1.Layer{Digest: digest, Size: size} }
	// kwok-node-0 holds a:0, the node that goes x:0 and x:1.
	caches := []*v1alpha1.NodeImageCache{
		{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0"}, Layers: []v1alpha1.Layer{layer("00000000000000a0", 1<<30)},
			Images: []v1alpha1.CachedImage{{Names: []string{"example.com/swe/a:0"}, Layers: []int32{0}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: gone}, Layers: []v1alpha1.Layer{layer("00000000000000e0", 2<<30), layer("00000000000000f0", 300<<20), layer("00000000000000f1", 300<<20)},
			Images: []v1alpha1.CachedImage{{Names: []string{"example.com/swe/x:0"}, Layers: []int32{0, 1}}, {Names: []string{"example.com/swe/x:1"}, Layers: []int32{0, 2}}}},
	}
	createCaches(t, ctx, admin, caches)
	var ts []tasks.Task
	for _, img := range []string{"example.com/swe/a:0", "example.com/swe/x:0", "example.com/swe/a:0", "example.com/swe/x:1", "example.com/swe/a:0", "example.com/swe/x:0"} {
		ts = append(ts, tasks.Task{ID: fmt.Sprintf("t%d", len(ts)), Image: img})
	}
	cfg := testConfig("pipelined")
	cfg.PlannedPulls = new(true)
	cfg.AgentSilence.Duration = 5 * time.Second
	// Two slots a node: each runs two of its three tasks at once, and has
	// one still to start when the other goes.
	cfg.Template.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}
	f := open(t, ctx, "planned-"+how, cfg, ts, cluster)
	ns := f.Clusters()[0].Namespace()
	var once sync.Once
	// Stopping the agent: a stand-in for asrl-prepull-agent (which needs
	// a container runtime kwok nodes lack) says, in the node's job, that
	// the node pulled its first image and is pulling the next, and then
	// writes no more.
	var mu sync.Mutex
	var unpulled string
	var onMovedTo []string
	movedRan := make(chan struct{})
	ranMoved := sync.OnceFunc(func() { close(movedRan) })
	jobsOf := func(ctx context.Context, hostname string) ([]v1alpha1.PrepullJob, error) {
		jobs := &v1alpha1.PrepullJobList{}
		if err := admin.Client.List(ctx, jobs, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		return slices.DeleteFunc(jobs.Items, func(j v1alpha1.PrepullJob) bool { return j.Spec.NodeSelector[corev1.LabelHostname] != hostname }), nil
	}
	goes := func(ctx context.Context) error {
		switch how {
		case "deleted":
			return admin.Kube.CoreV1().Nodes().Delete(ctx, gone, metav1.DeleteOptions{})
		case "cordoned":
			return admin.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gone}},
				client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`)))
		}
		jobs, err := jobsOf(ctx, gone)
		if err != nil || len(jobs) != 1 || len(jobs[0].Spec.Images) != 2 {
			return fmt.Errorf("the node's PrepullJobs: %v %v, want one of its two images", jobs, err)
		}
		job := jobs[0]
		mu.Lock()
		unpulled = job.Spec.Images[1]
		mu.Unlock()
		job.Status.Nodes = []v1alpha1.NodePrepullStatus{{Node: gone, Phase: v1alpha1.PrepullPulling, Present: 1, Pending: 1, UpdateTime: metav1.Now()}}
		return admin.Client.Status().Update(ctx, &job)
	}
	work := func(ctx context.Context, task tasks.Task, s *fleet.Sandbox) (fleet.Output, error) {
		if s.Node != gone {
			mu.Lock()
			moved := how == "agent-stopped" && task.Image == unpulled
			mu.Unlock()
			if moved {
				jobs, err := jobsOf(ctx, "kwok-node-0")
				if err != nil {
					return fleet.Output{}, err
				}
				mu.Lock()
				for _, j := range jobs {
					onMovedTo = append(onMovedTo, j.Spec.Images...)
				}
				mu.Unlock()
				if jobs, err = jobsOf(ctx, gone); err != nil || len(jobs) > 0 {
					return fleet.Output{}, fmt.Errorf("the stopped agent's node still has PrepullJobs %v (%v)", jobs, err)
				}
				ranMoved()
			}
			return fleet.Output{}, nil
		}
		var err error
		once.Do(func() { err = goes(ctx) })
		if err != nil {
			return fleet.Output{}, err
		}
		// A task on the node runs past the run's next look at the nodes,
		// or until the run cuts it short; with its agent stopped, until
		// the task moved away ran.
		wait := time.After(10 * time.Second)
		if how == "agent-stopped" {
			wait = time.After(2 * time.Minute)
		}
		select {
		case <-wait:
			return fleet.Output{}, nil
		case <-movedRan:
			return fleet.Output{}, nil
		case <-ctx.Done():
			return fleet.Output{}, ctx.Err()
		}
	}
	ran := runOK(t, ctx, f, work)
	moved := 0
	for _, task := range ts {
		switch node := ran[task.ID]; {
		case node == "kwok-node-0":
			if strings.Contains(task.Image, "/x:") {
				moved++
			}
		case node != gone || how == "deleted":
			t.Errorf("task %s (%s) ended on %q, want kwok-node-0, the planned node left", task.ID, task.Image, node)
		}
	}
	if want := map[string]int{"deleted": 3, "cordoned": 1, "agent-stopped": 1}[how]; moved != want {
		t.Errorf("%d tasks of the node %s moved to kwok-node-0, want %d", moved, how, want)
	}
	if how == "agent-stopped" && !slices.Contains(onMovedTo, unpulled) {
		t.Errorf("kwok-node-0's PrepullJobs pull %v, want the moved task's image %s among them", onMovedTo, unpulled)
	}
	assertEmpty(t, ctx, f)
}

// With planned pulls asked for and no agent on any node, the run says so
// once and runs its windows as without a plan.
func TestPlannedPullsWithoutAgents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctx, logged := captureLog(ctx)
	cfg := testConfig("pipelined")
	cfg.PlannedPulls = new(true)
	f := open(t, ctx, "planned-no-agents", cfg, skewed(), cluster)
	runOK(t, ctx, f, func(context.Context, tasks.Task, *fleet.Sandbox) (fleet.Output, error) { return fleet.Output{}, nil })
	said := 0
	for _, line := range logged() {
		if strings.Contains(line, "Planned pulls") {
			said++
			if !strings.Contains(line, "no node the run may use runs asrl-prepull-agent") {
				t.Errorf("the run said %s, want that no node runs the agent", line)
			}
		}
	}
	if said != 1 {
		t.Errorf("the run spoke of planned pulls %d times, want once", said)
	}
	assertEmpty(t, ctx, f)
}

// On a node that holds no more sandboxes than the run has tasks in flight
// (counting what a Pod already there takes), a pipelined window's
// warm-ahead waits until the window's tasks all have sandboxes, so that
// it takes no slot their cold claims wait for: no task
// waits for another to end (a claim is a sandbox's start, not a task's
// length), every task ends well, and the run says why, once.
func TestWarmAheadOnAFullNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	// A tainted node of 8 CPUs, for this run's sandboxes alone but for a
	// Pod of 4 CPUs already there (another run's, say): it holds 4.
	taint := corev1.Taint{Key: "sandbox-fleet.test/full", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	toleration := corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect}
	node := testcluster.Node{Name: "full-0", Labels: map[string]string{taint.Key: taint.Value}, Taints: []corev1.Taint{taint},
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods: resource.MustParse("110")}}
	if err := cluster.AddNodes(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "full-0-other", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{NodeName: node.Name, Tolerations: []corev1.Toleration{toleration}, Containers: []corev1.Container{{
			Name: "other", Image: "example.com/other:v1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}}}}
	if _, err := admin.Kube.CoreV1().Pods(other.Namespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Kube.CoreV1().Pods(other.Namespace).Delete(context.Background(), other.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	})
	// 6 images × 2 tasks at 4 at once: windows of 2 images, a warm
	// sandbox each; each window claims its other 2 cold. The peak is the
	// 4 tasks and two windows' 2 warm: 8 sandboxes, on a node of 4.
	var ts []tasks.Task
	for i := range 6 {
		for range 2 {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("t%d", len(ts)), Image: fmt.Sprintf("example.com/swe/full-%d:v1", i)})
		}
	}
	cfg := testConfig("pipelined")
	cfg.MaxConcurrent = 4
	cfg.Template.NodeSelector = node.Labels
	cfg.Template.Tolerations = []corev1.Toleration{toleration}
	cfg.Template.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	ctx, logged := captureLog(ctx)
	f := open(t, ctx, "full-node", cfg, ts, cluster)
	if peak := f.Plan().Peak.Pods; peak != 8 {
		t.Fatalf("the plan's peak is %d sandboxes, want 8", peak)
	}
	const hold = 6 * time.Second
	var mu sync.Mutex
	_, err = f.Run(ctx, fleet.RunOptions{
		Work: func(ctx context.Context, _ tasks.Task, _ *fleet.Sandbox) (fleet.Output, error) {
			select {
			case <-time.After(hold):
				return fleet.Output{}, nil
			case <-ctx.Done():
				return fleet.Output{}, ctx.Err()
			}
		},
		OnResult: func(r fleet.Result) {
			mu.Lock()
			defer mu.Unlock()
			if !r.OK {
				t.Errorf("task %s: %s", r.ID, r.Error)
			}
			if claim := time.Duration(r.Phases["claim"] * float64(time.Second)); claim >= hold/2 {
				t.Errorf("task %s waited %v for its sandbox: a slot the next window's warm sandboxes took", r.ID, claim.Round(time.Millisecond))
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	said := 0
	for _, line := range logged() {
		if strings.Contains(line, "fewer sandboxes than the run's peak") {
			said++
			if !strings.Contains(line, `"peak"=8`) || !strings.Contains(line, `"nodesHold"=4`) {
				t.Errorf("the run said %s, want a peak of 8 on nodes that hold 4", line)
			}
		}
	}
	if said != 1 {
		t.Errorf("the run said %d times that its nodes hold fewer sandboxes than its peak, want once", said)
	}
	assertEmpty(t, ctx, f)
}

// A user who may read the nodes and their caches, as planning needs, but
// not create or read PrepullJobs — the shipped RBAC grants them to no
// namespace's user (docs/admin.md) — runs a planned sweep: the refusal is
// logged once, each image's tasks still run on its planned node, every
// task ends well, the run ends with no error of its own about PrepullJobs,
// and the user's check finds nothing left.
func TestPlannedPullsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctx, logged := captureLog(ctx)
	admin, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	layer := func(digest string) v1alpha1.Layer { return v1alpha1.Layer{Digest: digest, Size: 1 << 30} }
	createCaches(t, ctx, admin, []*v1alpha1.NodeImageCache{
		{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0"}, Layers: []v1alpha1.Layer{layer("00000000000000a0")},
			Images: []v1alpha1.CachedImage{{Names: []string{"example.com/swe/a:0"}, Layers: []int32{0}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-1"}, Layers: []v1alpha1.Layer{layer("00000000000000b0")},
			Images: []v1alpha1.CachedImage{{Names: []string{"example.com/swe/b:0"}, Layers: []int32{0}}}},
	})
	want := map[string]string{"example.com/swe/a:0": "kwok-node-0", "example.com/swe/b:0": "kwok-node-1"}
	var ts []tasks.Task
	for _, img := range []string{"example.com/swe/b:0", "example.com/swe/a:0"} {
		for range 2 {
			ts = append(ts, tasks.Task{ID: fmt.Sprintf("t%d", len(ts)), Image: img})
		}
	}
	ns := cluster.NewNamespace(t)
	user := planningUser(t, ctx, admin, ns)
	cfg := testConfig("pipelined")
	cfg.PlannedPulls = new(true)
	f, err := fleet.Open(ctx, "planned-refused", cfg, ts, []fleet.Target{{Config: config.Cluster{Name: "c0", Weight: 1}, Clients: user}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ran := runOK(t, ctx, f, func(context.Context, tasks.Task, *fleet.Sandbox) (fleet.Output, error) { return fleet.Output{}, nil })
	for _, task := range ts {
		if ran[task.ID] != want[task.Image] {
			t.Errorf("task %s (%s) ran on %q, want %s, its planned node", task.ID, task.Image, ran[task.ID], want[task.Image])
		}
	}
	refused := 0
	for _, line := range logged() {
		switch {
		case strings.Contains(line, "creating the nodes' PrepullJobs failed"):
			refused++
		case strings.Contains(line, "PrepullJob") && strings.Contains(line, "error"):
			t.Errorf("the run logged %s", line)
		}
	}
	if refused != 1 {
		t.Errorf("the run logged the refused PrepullJobs %d times, want once", refused)
	}
	jobs := &v1alpha1.PrepullJobList{}
	if err := admin.Client.List(ctx, jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) > 0 {
		t.Errorf("PrepullJobs in %s: %d (%v), want none: the user may not create them", ns, len(jobs.Items), err)
	}
	assertEmpty(t, ctx, f)
}

// planningUser is the clients, in ns, of a user who may run the engine
// there and read the nodes and their NodeImageCaches, and nothing of
// PrepullJobs.
func planningUser(t *testing.T, ctx context.Context, admin *kube.Clients, ns string) *kube.Clients {
	t.Helper()
	name := "planner-" + ns
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{extensionsv1beta1.GroupVersion.Group}, Resources: []string{"sandboxtemplates", "sandboxwarmpools", "sandboxclaims"}, Verbs: []string{"create", "get", "list", "watch", "patch", "delete"}},
		{APIGroups: []string{sandboxv1beta1.GroupVersion.Group}, Resources: []string{"sandboxes"}, Verbs: []string{"get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "list", "update", "delete"}},
	}
	reads := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"nodeimagecaches"}, Verbs: []string{"get", "list", "watch"}},
	}
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}
	objs := []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: reads},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}},
	}
	for _, obj := range objs {
		if err := admin.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Client.Delete(context.Background(), obj) })
	}
	cfg := cluster.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{"system:authenticated"}}
	clients, err := kube.ForConfig(cfg, ns)
	if err != nil {
		t.Fatal(err)
	}
	return clients
}

// runOK runs f with work, fails t for every task that did not end well,
// and returns the node each task ran on.
func runOK(t *testing.T, ctx context.Context, f *fleet.Fleet, work fleet.Work) map[string]string {
	t.Helper()
	var mu sync.Mutex
	ran := map[string]string{}
	if _, err := f.Run(ctx, fleet.RunOptions{Work: work, OnResult: func(r fleet.Result) {
		mu.Lock()
		defer mu.Unlock()
		if !r.OK {
			t.Errorf("task %s: %s", r.ID, r.Error)
		}
		ran[r.ID] = r.Node
	}}); err != nil {
		t.Fatal(err)
	}
	return ran
}

// createCaches creates NodeImageCaches as an agent would, for the test.
func createCaches(t *testing.T, ctx context.Context, admin *kube.Clients, caches []*v1alpha1.NodeImageCache) {
	t.Helper()
	for _, nc := range caches {
		if err := admin.Client.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Client.Delete(context.Background(), nc) })
	}
}

// The breaker tears a run down when its sandboxes keep exceeding what the
// run asked for — here a pool scaled far up behind the run's back.
func TestBreaker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ts := []tasks.Task{{ID: "only", Image: "example.com/img:v1"}}
	cfg := testConfig("naive")
	cfg.MaxConcurrent = 1
	f := open(t, ctx, "runaway", cfg, ts, cluster)
	c := f.Clusters()[0]
	var result fleet.Result
	_, err := f.Run(ctx, fleet.RunOptions{OnResult: func(r fleet.Result) { result = r }, Work: func(ctx context.Context, _ tasks.Task, s *fleet.Sandbox) (fleet.Output, error) {
		pools := &extensionsv1beta1.SandboxWarmPoolList{}
		if err := c.Clients.Client.List(ctx, pools, client.InNamespace(c.Namespace())); err != nil {
			return fleet.Output{}, err
		}
		if len(pools.Items) != 1 {
			return fleet.Output{}, fmt.Errorf("%d pools, want 1", len(pools.Items))
		}
		if err := c.Clients.Client.Patch(ctx, &pools.Items[0], client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":20}}`))); err != nil {
			return fleet.Output{}, err
		}
		<-ctx.Done()
		return fleet.Output{}, ctx.Err()
	}})
	var over *fleet.OvercommitError
	if !errors.As(err, &over) || over.Expected != f.Plan().Peak.Pods || over.Ceiling < over.Expected || over.Live <= over.Ceiling {
		t.Fatalf("Run = %v (task: %+v), want the breaker's OvercommitError", err, result)
	}
	assertEmpty(t, ctx, f)
}

// With warm claim pacing, more tasks in flight than a pool has sandboxes
// still adopt only warm sandboxes: claims wait for the pool to refill
// instead of each cold-starting a sandbox.
func TestClaimPacing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ts []tasks.Task
	for i := range 12 {
		ts = append(ts, tasks.Task{ID: fmt.Sprint(i), Image: "example.com/img:v1"})
	}
	cfg := testConfig("naive")
	cfg.MaxConcurrent = 2 // a pool of 2
	cfg.Concurrency = 6
	cfg.ClaimPacing = "warm"
	f := open(t, ctx, "paced", cfg, ts, cluster)
	c := f.Clusters()[0]
	var mu sync.Mutex
	launch := map[string]int{}
	_, err := f.Run(ctx, fleet.RunOptions{Work: func(ctx context.Context, _ tasks.Task, s *fleet.Sandbox) (fleet.Output, error) {
		sandbox := &sandboxv1beta1.Sandbox{}
		if err := c.Clients.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Sandbox}, sandbox); err != nil {
			return fleet.Output{}, err
		}
		mu.Lock()
		launch[sandbox.Labels["agents.x-k8s.io/launch-type"]]++
		mu.Unlock()
		return fleet.Output{}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if launch["warm"] != len(ts) {
		t.Errorf("launch types %v: want all %d claims served warm", launch, len(ts))
	}
	assertEmpty(t, ctx, f)
}

// Epochs run every task once a pass, and the pools of the first pass serve
// the second: nothing is warmed twice.
func TestEpochsKeepPools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ts := skewed()[:12] // one image
	cfg := testConfig("naive")
	cfg.Epochs = 2
	f := open(t, ctx, "epochs", cfg, ts, cluster)
	var mu sync.Mutex
	per := map[int]int{}
	rep, err := f.Run(ctx, fleet.RunOptions{Work: fleet.NoWork, OnResult: func(r fleet.Result) {
		mu.Lock()
		defer mu.Unlock()
		per[r.Epoch]++
	}})
	if err != nil {
		t.Fatal(err)
	}
	if per[1] != len(ts) || per[2] != len(ts) {
		t.Errorf("results per epoch %v, want %d in each of 2", per, len(ts))
	}
	if rep.WarmReplicasTotal != f.Plan().WarmFootprint {
		t.Errorf("%d replicas warmed over two epochs, want the plan's %d once", rep.WarmReplicasTotal, f.Plan().WarmFootprint)
	}
	assertEmpty(t, ctx, f)
}

// A pool with a replica no node has room for — as while an autoscaler
// adds a node — is not given up for it: once that replica is past its
// grace the pool serves with the replicas Ready, and the image's tasks run.
func TestPoolServesWithWhatIsReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Room for two 250m sandboxes, tainted so no other test's Pods land here.
	taint := corev1.Taint{Key: "sandbox-fleet.test/tight", Effect: corev1.TaintEffectNoSchedule}
	if err := cluster.AddNodes(ctx, testcluster.Node{Name: "tight-0", Labels: map[string]string{"tight": "true"},
		Taints: []corev1.Taint{taint}, Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("600m"), corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods: resource.MustParse("110")}}); err != nil {
		t.Fatal(err)
	}
	ts := []tasks.Task{{ID: "a", Image: "example.com/img:v1"}, {ID: "b", Image: "example.com/img:v1"}}
	cfg := testConfig("naive")
	cfg.MaxConcurrent = 2
	cfg.UnschedulableGrace.Duration = 2 * time.Second
	cfg.Template.NodeSelector = map[string]string{"tight": "true"}
	cfg.Template.Tolerations = []corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpExists}}
	ctx, said := captureLog(ctx)
	f := open(t, ctx, "short", cfg, ts, cluster)

	if err := f.Warm(ctx, []string{"example.com/img:v1"}, func(string) int { return 3 }); err != nil {
		t.Fatalf("Warm of a pool with two of three replicas Ready = %v; want it to serve with those", err)
	}
	// The engine says so through the logger its caller gave it.
	if !slices.ContainsFunc(said(), func(line string) bool { return strings.Contains(line, "serves with fewer sandboxes than planned") }) {
		t.Errorf("the caller's logger was not told the pool serves with fewer sandboxes: %q", said())
	}
	collect(t, ctx, f)
	assertEmpty(t, ctx, f)
}

// What the template adds reaches the cluster as the API server keeps it:
// an extraTemplateSpec field on each SandboxTemplate, and a {task_image}
// container in each pool's Pods with that pool's image.
func TestTemplateExtrasReachTheCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	images := []string{"example.com/swe/django:1", "example.com/swe/astropy:1"}
	ts := []tasks.Task{{ID: "a", Image: images[0]}, {ID: "b", Image: images[1]}}
	cfg := testConfig("naive")
	cfg.Template.ExtraTemplateSpec = map[string]any{"networkPolicyManagement": "Unmanaged"}
	cfg.Template.ExtraPodSpec = &corev1.PodSpec{Containers: []corev1.Container{{Name: "grader", Image: config.TaskImage, Command: []string{"sleep", "infinity"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f := open(t, ctx, "extras", cfg, ts, cluster)
	if err := f.Warm(ctx, images, func(string) int { return 1 }); err != nil {
		t.Fatal(err)
	}
	c := f.Clusters()[0].Clients.Client
	templates := &extensionsv1beta1.SandboxTemplateList{}
	if err := c.List(ctx, templates, client.InNamespace(f.Clusters()[0].Namespace())); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(f.Clusters()[0].Namespace())); err != nil {
		t.Fatal(err)
	}
	if len(templates.Items) != 2 || len(pods.Items) < 2 {
		t.Fatalf("%d templates and %d pods, want 2 and at least 2", len(templates.Items), len(pods.Items))
	}
	for _, tmpl := range templates.Items {
		if tmpl.Spec.NetworkPolicyManagement != extensionsv1beta1.NetworkPolicyManagementUnmanaged {
			t.Errorf("template %s: networkPolicyManagement %q, want extraTemplateSpec's Unmanaged", tmpl.Name, tmpl.Spec.NetworkPolicyManagement)
		}
	}
	for _, pod := range pods.Items {
		var sandbox, grader string
		for _, ctr := range pod.Spec.Containers {
			switch ctr.Name {
			case "sandbox":
				sandbox = ctr.Image
			case "grader":
				grader = ctr.Image
			}
		}
		if !slices.Contains(images, sandbox) || grader != sandbox {
			t.Errorf("pod %s runs sandbox %q and grader %q, want both the pool's image", pod.Name, sandbox, grader)
		}
	}
	collect(t, ctx, f)
	assertEmpty(t, ctx, f)
}

// Start, on a fleet opened without WithHeartbeat, holds the run's Lease
// for the default 30 s as "fleet" of this process, and its Stop deletes it.
func TestStartHeartbeatsDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := open(t, ctx, "run-beats", testConfig("naive"), skewed(), cluster)
	beats, err := f.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := f.Clusters()[0]
	lease, err := c.Clients.Kube.CoordinationV1().Leases(c.Namespace()).Get(ctx, fleet.HeartbeatLease(f.RunID()), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := lease.Spec.LeaseDurationSeconds; d == nil || *d != 30 {
		t.Errorf("lease duration %v, want 30 s", d)
	}
	if h := lease.Spec.HolderIdentity; h == nil || !strings.HasPrefix(*h, "fleet@") || !strings.HasSuffix(*h, fmt.Sprintf("/%d", os.Getpid())) {
		t.Errorf("lease holder %v, want fleet@<host>/%d", h, os.Getpid())
	}
	if err := beats.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clients.Kube.CoordinationV1().Leases(c.Namespace()).Get(ctx, fleet.HeartbeatLease(f.RunID()), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Lease after stop: %v, want it gone", err)
	}
}

// A start cut short by its context's end (an interrupt) says why — the
// cause, not the checks' own errors — and that nothing was created; and
// nothing was.
func TestStartInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := open(t, ctx, "run-cut", testConfig("naive"), skewed(), cluster)
	interrupted := errors.New("interrupted by terminated")
	cut, stop := context.WithCancelCause(ctx)
	stop(interrupted)
	if _, err := f.Start(cut); !errors.Is(err, interrupted) || !errors.Is(err, fleet.ErrNothingCreated) {
		t.Errorf("Start after an interrupt: %v, want the interrupt and ErrNothingCreated", err)
	}
	c := f.Clusters()[0]
	if _, err := c.Clients.Kube.CoordinationV1().Leases(c.Namespace()).Get(ctx, fleet.HeartbeatLease(f.RunID()), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the run's Lease after an interrupted start: %v, want none", err)
	}
}

// Open checks its options once, before it follows anything: each bad one
// is named.
func TestOpenChecksItsOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, err := cluster.Clients(cluster.NewNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	target := fleet.Target{Config: config.Cluster{Name: "c0", Weight: 1}, Clients: clients}
	for _, tt := range []struct {
		opts []fleet.Option
		want string
	}{
		{[]fleet.Option{fleet.WithHeartbeat("test", 500*time.Millisecond)}, "the heartbeat 500ms: must be at least 1s"},
		{[]fleet.Option{fleet.WithPrepull(101)}, "the prepull high-water mark "},
		{[]fleet.Option{fleet.WithHeartbeat("test", -time.Second), fleet.WithPrepull(-1)}, "the heartbeat -1s"},
	} {
		f, err := fleet.Open(ctx, "run-opts", testConfig("naive"), skewed(), []fleet.Target{target}, tt.opts...)
		if err == nil {
			f.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open with %d options: %v, want an error with %q", len(tt.opts), err, tt.want)
		}
	}
}

// captureLog gives ctx a logger that keeps what it is told, as a caller
// of the engine chooses where its words go.
func captureLog(ctx context.Context) (context.Context, func() []string) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	return logr.NewContext(ctx, log), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}
