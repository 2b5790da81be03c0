package nodecachelocality_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testscheduler"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, &cluster,
		testcluster.WithNodes(testcluster.FakeNodes("node", 4, testcluster.DefaultCapacity(), nil)...))
}

// Layers of SWE-bench-style images: a shared base, an environment per
// repository, and each instance's own.
var (
	base      = v1alpha1.Layer{Digest: "00000000000000b0", Size: 8 << 30}
	djangoEnv = v1alpha1.Layer{Digest: "00000000000000e1", Size: 1 << 30}
	flaskEnv  = v1alpha1.Layer{Digest: "00000000000000e2", Size: 1 << 30}
	django1   = v1alpha1.Layer{Digest: "00000000000000d1", Size: 100 << 20}
	django2   = v1alpha1.Layer{Digest: "00000000000000d2", Size: 100 << 20}
)

// nodeCache is the NodeImageCache of a node holding one image.
func nodeCache(node, image string, layers ...v1alpha1.Layer) *v1alpha1.NodeImageCache {
	c := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: node}, Layers: layers,
		Images: []v1alpha1.CachedImage{{Names: []string{image}}}}
	for i := range layers {
		c.Images[0].Layers = append(c.Images[0].Layers, int32(i))
	}
	return c
}

// The real kube-scheduler built with NodeCacheLocality, in the shipped
// configuration, on kwok nodes with hand-written NodeImageCaches: a Pod
// goes to the node lacking the fewest bytes of its image; without a
// preference (an image no node has), or with the plugin left out of a
// profile, it chooses as the cluster's stock kube-scheduler does; a node
// without room is passed over for the next best.
func TestNodeCacheLocality(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := testscheduler.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clients, err := cluster.Clients(cluster.NewNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	c := clients.Client
	// node-0 runs no agent; each other node holds one image.
	for _, nc := range []*v1alpha1.NodeImageCache{
		nodeCache("node-1", "swebench/flask-1:v1", base, flaskEnv),
		nodeCache("node-2", "swebench/django-1:v1", base, djangoEnv, django1),
		nodeCache("node-3", "swebench/django-2:v1", base, djangoEnv, django2),
	} {
		if err := c.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), nc) })
	}
	// The same binary with a profile that leaves the plugin out.
	off := configv1.KubeSchedulerProfile{SchedulerName: ptr.To("without-node-cache")}
	if _, err := testscheduler.Start(ctx, cluster, bin, []configv1.KubeSchedulerProfile{off}); err != nil {
		t.Fatal(err)
	}

	// Nodes 1 to 3 run a Pod of 4 CPUs each, so the resource plugins
	// prefer node-0 when nothing else counts.
	for i := 1; i <= 3; i++ {
		filler := pod(clients.Namespace, fmt.Sprintf("filler-%d", i), "", "registry.k8s.io/pause:3.10", "4")
		filler.Spec.NodeName = fmt.Sprintf("node-%d", i)
		if err := c.Create(ctx, filler); err != nil {
			t.Fatal(err)
		}
	}

	for i, step := range []struct {
		what, scheduler, image, cpu, want string
	}{
		{"the stock scheduler prefers the least allocated node", "default-scheduler", "swebench/django-1:v1", "1", "node-0"},
		{"an image no node has: the same choice", testscheduler.SchedulerName, "swebench/astropy-1:v1", "1", "node-0"},
		{"the plugin off: the same choice", *off.SchedulerName, "swebench/django-1:v1", "1", "node-0"},
		{"the node that has the image", testscheduler.SchedulerName, "docker.io/swebench/django-1:v1", "1", "node-2"},
		{"another image, another node", testscheduler.SchedulerName, "swebench/flask-1:v1", "1", "node-1"},
		// node-2 has 27 CPUs free, node-3 (the image's sibling, lacking
		// 100 MiB of it) and node-0 (lacking all of it) have room.
		{"the node with the image is full: the one lacking least of it", testscheduler.SchedulerName, "swebench/django-1:v1", "28", "node-3"},
	} {
		name := fmt.Sprintf("step-%d", i)
		p := pod(clients.Namespace, name, step.scheduler, step.image, step.cpu)
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if got := boundTo(t, ctx, c, p); got != step.want {
			t.Errorf("%s: %s went to %s, want %s", step.what, name, got, step.want)
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

// boundTo waits for p to be bound and returns its node.
func boundTo(t *testing.T, ctx context.Context, c client.Client, p *corev1.Pod) string {
	t.Helper()
	for {
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != "" {
			return got.Spec.NodeName
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Pod %s was not scheduled: %+v", p.Name, got.Status.Conditions)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
