package nodecachelocality

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testobjects"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testregistry"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testscheduler"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, &cluster,
		testcluster.WithNodes(testcluster.FakeNodes("node", 4, testcluster.DefaultCapacity(), nil)...))
}

// The real kube-scheduler built with NodeCacheLocality, in the shipped
// configuration, on kwok nodes with hand-written NodeImageCaches: a Pod
// goes to the node lacking the fewest bytes of its image; without a
// preference (an image no node has), or with the plugin left out of a
// profile, it chooses as the cluster's stock kube-scheduler does; a node
// without room is passed over for the next best. The webhook's node-cache
// affinity makes the stock scheduler choose the same nodes.
func TestNodeCacheLocality(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	schedulerBin, err := testscheduler.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	webhookBin, err := testcluster.BuildCommand(dir, "asrl-webhook")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	// node-0 runs no agent; each other node holds one image.
	for _, nc := range []*v1alpha1.NodeImageCache{
		testobjects.NodeImageCache("node-1", map[string][]v1alpha1.Layer{"swebench/flask-1:v1": {base, flaskEnv}}),
		testobjects.NodeImageCache("node-2", map[string][]v1alpha1.Layer{"swebench/django-1:v1": {base, djangoEnv, django1}}),
		testobjects.NodeImageCache("node-3", map[string][]v1alpha1.Layer{"swebench/django-2:v1": {base, djangoEnv, django2}}),
	} {
		if err := admin.Client.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Client.Delete(context.Background(), nc) })
	}
	// The registry the plugin may read, and one it may not.
	allowed, other := testregistry.Start(t), testregistry.Start(t)
	// The same binary with a profile that leaves the plugin out.
	off := configv1.KubeSchedulerProfile{SchedulerName: ptr.To("without-node-cache")}
	edit := func(cfg *configv1.KubeSchedulerConfiguration) {
		set := false
		for _, p := range cfg.Profiles {
			for i, pc := range p.PluginConfig {
				if pc.Name == Name {
					p.PluginConfig[i].Args = runtime.RawExtension{Raw: fmt.Appendf(nil, `{"allowedRegistries":[%q]}`, allowed.Host)}
					set = true
				}
			}
		}
		if !set {
			t.Fatalf("the shipped configuration has no pluginConfig for %s", Name)
		}
		cfg.Profiles = append(cfg.Profiles, off)
	}
	if _, err := testscheduler.Start(ctx, cluster, schedulerBin, edit); err != nil {
		t.Fatal(err)
	}

	t.Run("asrl-scheduler", func(t *testing.T) {
		place(t, ctx, cluster.NewNamespace(t), "", []step{
			{"the stock scheduler prefers the least allocated node", "default-scheduler", "swebench/django-1:v1", "1", "node-0"},
			{"an image no node has: the same choice", testscheduler.SchedulerName, "swebench/astropy-1:v1", "1", "node-0"},
			{"the plugin off: the same choice", *off.SchedulerName, "swebench/django-1:v1", "1", "node-0"},
			{"the node that has the image", testscheduler.SchedulerName, "docker.io/swebench/django-1:v1", "1", "node-2"},
			{"another image, another node", testscheduler.SchedulerName, "swebench/flask-1:v1", "1", "node-1"},
			// node-2 has 27 CPUs free, node-3 (the image's sibling, lacking
			// 100 MiB of it) and node-0 (lacking all of it) have room.
			{"the node with the image is full: the one lacking least of it", testscheduler.SchedulerName, "swebench/django-1:v1", "28", "node-3"},
		})
	})

	t.Run("webhook node-cache affinity, stock scheduler", func(t *testing.T) {
		ns := cluster.NewNamespace(t)
		server, err := testwebhook.Start(ctx, cluster, ns, webhookBin)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := server.Close(); err != nil {
				t.Error(err)
			}
		})
		p := &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "node-cache-" + ns}, Spec: v1alpha1.SandboxPolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			NodeCache:         &v1alpha1.NodeCachePolicy{Weight: 100},
			// The fillers are the nodes' other work, no sandboxes.
			OtherPodSelector: &metav1.LabelSelector{MatchLabels: fillerLabels}}}
		if err := admin.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Client.Delete(context.Background(), p) })
		if err := server.WaitForNodeAffinity(ctx, ns, "swebench/django-1:v1"); err != nil {
			t.Fatal(err)
		}
		const stock = "default-scheduler"
		place(t, ctx, ns, policy.SandboxPodLabel, []step{
			{"an image no node has: the stock choice", stock, "swebench/astropy-1:v1", "1", "node-0"},
			{"the node that has the image", stock, "docker.io/swebench/django-1:v1", "1", "node-2"},
			{"another image, another node", stock, "swebench/flask-1:v1", "1", "node-1"},
			{"the node with the image is full: the one holding most of it", stock, "swebench/django-1:v1", "28", "node-3"},
		})
	})

	t.Run("an image no node lists, from its registry", func(t *testing.T) {
		ref, layers := allowed.PushRandom(t, "swebench/unlisted:v1")
		// An image of a registry the plugin may not read, whose layers
		// node-0 also holds.
		notRead, otherLayers := other.PushRandom(t, "swebench/unlisted:v1")
		pushed := other.Manifests.Load()
		// node-0 holds two of its three layers, under another image's name.
		sibling := testobjects.NodeImageCache("node-0", map[string][]v1alpha1.Layer{"swebench/sibling:v1": layers[:2], "swebench/other:v1": otherLayers[:2]})
		if err := admin.Client.Create(ctx, sibling); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Client.Delete(context.Background(), sibling) })
		ns := cluster.NewNamespace(t)
		clients, err := cluster.Clients(ns)
		if err != nil {
			t.Fatal(err)
		}
		// The Pods prefer node-1; the first starts the registry read and
		// goes there, a later one to node-0, which holds most of the image.
		// (The Pods of the image the plugin may not read all go to node-1.)
		schedule := func(name, image string) string {
			p := pod(ns, name, testscheduler.SchedulerName, image, "1")
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-1"}}}}}}}}
			if err := clients.Client.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			got, err := testscheduler.BoundTo(ctx, clients.Client, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := clients.Client.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
			return got
		}
		for i := 0; ; i++ {
			if got := schedule(fmt.Sprintf("not-read-%d", i), notRead); got != "node-1" {
				t.Fatalf("a Pod of %s, from a registry not in allowedRegistries, went to %s: want no preference (node-1)", notRead, got)
			}
			got := schedule(fmt.Sprintf("unlisted-%d", i), ref)
			switch {
			case i == 0 && got != "node-1":
				t.Fatalf("the first Pod went to %s: before the registry answers, want no preference (node-1)", got)
			case got == "node-0":
				if n := other.Manifests.Load(); n != pushed {
					t.Errorf("the registry not in allowedRegistries was asked %d times for manifests", n-pushed)
				}
				return
			case i == 20:
				t.Fatalf("20 Pods on, one still went to %s, not to node-0, which holds most of the image", got)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// step is a Pod to schedule and the node it must go to.
type step struct {
	what, scheduler, image, cpu, want string
}

// place runs a Pod of 4 CPUs on each of nodes 1 to 3 — so the resource
// plugins prefer node-0 when nothing else counts — then schedules the
// steps' Pods one by one in ns, each labelled label if not empty, and
// checks where they go; it deletes them all at the end, freeing the
// nodes for the next test.
func place(t *testing.T, ctx context.Context, ns, label string, steps []step) {
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	c := clients.Client
	t.Cleanup(func() {
		ctx := context.Background()
		if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
			t.Error(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			pods := &corev1.PodList{}
			if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil || len(pods.Items) == 0 || time.Now().After(deadline) {
				return
			}
		}
	})
	for i := 1; i <= 3; i++ {
		filler := pod(ns, fmt.Sprintf("filler-%d", i), "", "registry.k8s.io/pause:3.10", "4")
		filler.Labels = fillerLabels
		filler.Spec.NodeName = fmt.Sprintf("node-%d", i)
		if err := c.Create(ctx, filler); err != nil {
			t.Fatal(err)
		}
	}
	for i, step := range steps {
		p := pod(ns, fmt.Sprintf("step-%d", i), step.scheduler, step.image, step.cpu)
		if label != "" {
			p.Labels = map[string]string{label: p.Name}
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		got, err := testscheduler.BoundTo(ctx, c, p)
		if err != nil {
			t.Fatal(err)
		}
		if got != step.want {
			t.Errorf("%s: %s went to %s, want %s", step.what, p.Name, got, step.want)
		}
	}
}

func pod(ns, name, scheduler, image, cpu string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
		SchedulerName: scheduler,
		Containers: []corev1.Container{{Name: "main", Image: image,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}},
	}}
}

// fillerLabels mark the Pods that fill nodes beside the sandboxes.
var fillerLabels = map[string]string{"role": "filler"}
