package testcluster

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwokNodeAnnotation marks the nodes kwok manages, so that a real kubelet's
// node in the same cluster is left alone.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

func (c *Cluster) startKwok(port int) (waitFunc, error) {
	stages, err := c.bins.kwokStageFiles()
	if err != nil || len(stages) == 0 {
		return nil, fmt.Errorf("kwok stages missing from %s: rerun `make testbin`", c.bins.dir)
	}
	// kwok takes one configuration file holding all its stages.
	var config []byte
	for _, s := range stages {
		b, err := os.ReadFile(s)
		if err != nil {
			return nil, err
		}
		config = append(config, "---\n"...)
		config = append(config, b...)
		config = append(config, '\n')
	}
	configPath := filepath.Join(c.dir, "kwok.yaml")
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		return nil, err
	}
	p, err := c.run("kwok", []string{
		"--kubeconfig=" + c.Kubeconfig(),
		"--config=" + configPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
		"--node-ip=127.0.0.1",
		"--node-port=" + strconv.Itoa(port),
		"--server-address=127.0.0.1:" + strconv.Itoa(port),
		// Pod IPs are never dialled; a /16 leaves room for scale tests.
		"--cidr=10.200.0.0/16",
		// The heartbeat stage refreshes node status only every ten minutes
		// and counts on node leases for liveness; without them the node
		// lifecycle controller sees the nodes go silent and marks their
		// Pods NotReady, which kwok never undoes.
		"--node-lease-duration-seconds=40",
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return p.waitFor(ctx, "healthz", httpOK(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", port)))
	}, nil
}

// createNodes registers the kwok nodes and waits until kwok reports each Ready.
func (c *Cluster) createNodes(ctx context.Context) error {
	for _, n := range c.opts.nodes {
		labels := map[string]string{
			corev1.LabelHostname:   n.Name,
			corev1.LabelOSStable:   "linux",
			corev1.LabelArchStable: "amd64",
			"type":                 "kwok",
		}
		maps.Copy(labels, n.Labels)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        n.Name,
				Labels:      labels,
				Annotations: map[string]string{kwokNodeAnnotation: "fake"},
			},
			Spec: corev1.NodeSpec{Taints: n.Taints},
			Status: corev1.NodeStatus{Capacity: n.Capacity, Allocatable: n.Capacity,
				// The apiserver dials nodes by Hostname first (for the
				// real node); kwok's server is on loopback.
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "localhost"}, {Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}},
		}
		if _, err := c.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", n.Name, err)
		}
	}
	for _, n := range c.opts.nodes {
		err := poll(ctx, "node "+n.Name+" to be Ready with a lease", func(ctx context.Context) error {
			if err := c.nodeReady(ctx, n.Name); err != nil {
				return err
			}
			// Without a renewed lease the node would be declared dead.
			_, err := c.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
