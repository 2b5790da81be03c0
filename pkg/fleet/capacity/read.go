package capacity

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
)

// PoolLabels are the node labels that name a node's pool: GKE's, EKS's,
// Karpenter's and AKS's.
var PoolLabels = []string{
	"cloud.google.com/gke-nodepool",
	"eks.amazonaws.com/nodegroup",
	"karpenter.sh/nodepool",
	"kubernetes.azure.com/agentpool",
}

// Read probes the schedulable nodes selector picks on cluster: what they
// offer, and from the NodeImageCaches their image filesystems, the layers
// of images (named, with their tasks; any node's cache may tell) and which
// of those layers each selected node holds. When the caches cannot be read
// (no node agent installed, or no right to list them) the images' layers
// are unknown, and the returned note says why.
func Read(ctx context.Context, c client.Client, cluster string, selector map[string]string, images []Image) (Probe, string, error) {
	p, err := ReadNodes(ctx, c, cluster, selector)
	if err != nil {
		return p, "", err
	}
	at := map[string]int{}
	for i, n := range p.Nodes {
		at[n.Name] = i
	}
	index := nodecache.NewIndex()
	selected := map[int]*nodecache.Node{}
	note := ""
	// Every node's cache tells the layers of the images it holds; the
	// selected nodes' tell what they hold of them.
	err = informer.EachCache(ctx, c, func(nic *v1alpha1.NodeImageCache) error {
		n, err := nodecache.NewNode(nic)
		if err != nil {
			return nil
		}
		index.Set(n)
		if i, ok := at[nic.Name]; ok {
			p.Nodes[i].ImageFSBytes = nic.ImageFilesystem.CapacityBytes
			selected[i] = n
		}
		return nil
	})
	switch {
	case meta.IsNoMatchError(err):
		note = "the cluster has no NodeImageCache API (asrl-prepull-agent is not installed): image sizes are assumed, and every node lacks every image"
	case apierrors.IsForbidden(err):
		note = "you may not list NodeImageCaches: image sizes are assumed, and every node lacks every image"
	case err != nil:
		return p, "", fmt.Errorf("cluster %s: %w", cluster, err)
	}
	for _, img := range images {
		img.Layers = index.PodLayers([]string{img.Name}, nil)
		p.Images = append(p.Images, img)
	}
	layers := p.layers()
	for i, n := range selected {
		p.Nodes[i].Holds = map[string]bool{}
		for _, l := range layers {
			if n.Missing([]v1alpha1.Layer{l}) == 0 {
				p.Nodes[i].Holds[l.Digest] = true
			}
		}
	}
	return p, note, nil
}

// ReadNodes reads what the schedulable nodes selector picks on cluster
// offer, and nothing of their caches.
func ReadNodes(ctx context.Context, c client.Client, cluster string, selector map[string]string) (Probe, error) {
	p := Probe{Cluster: cluster}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes, client.MatchingLabels(selector)); err != nil {
		return p, fmt.Errorf("cluster %s: listing its nodes: %w", cluster, err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			continue
		}
		alloc := n.Status.Allocatable
		node := Node{Name: n.Name, CPUMilli: alloc.Cpu().MilliValue(), MemoryBytes: alloc.Memory().Value(),
			Pods: alloc.Pods().Value(), EphemeralBytes: alloc.StorageEphemeral().Value()}
		for _, l := range PoolLabels {
			if v := n.Labels[l]; v != "" {
				node.Pool = v
				break
			}
		}
		p.Nodes = append(p.Nodes, node)
	}
	return p, nil
}

// ReadTaken reads, by node name, what the Pods not ended on cluster's
// nodes request of them.
func ReadTaken(ctx context.Context, c client.Client, cluster string) (map[string]Taken, error) {
	pods := &corev1.PodList{}
	notEnded := fields.AndSelectors(fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)))
	if err := c.List(ctx, pods, client.MatchingFieldsSelector{Selector: notEnded}); err != nil {
		return nil, fmt.Errorf("cluster %s: listing the Pods on its nodes: %w", cluster, err)
	}
	return TakenOf(pods.Items), nil
}
