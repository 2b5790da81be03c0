package testcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
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
		if c.opts.pullDelays && filepath.Base(s) == "pod-ready.yaml" {
			if b, err = readyAtAnnotated(b); err != nil {
				return nil, fmt.Errorf("%s: %w", s, err)
			}
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

// readyAtAnnotated edits kwok's pod-ready stage to wait for a Pod's
// ReadyAtAnnotation and fire at the time it holds.
func readyAtAnnotated(stage []byte) ([]byte, error) {
	var s map[string]any
	if err := yaml.Unmarshal(stage, &s); err != nil {
		return nil, err
	}
	spec, _ := s["spec"].(map[string]any)
	selector, ok := spec["selector"].(map[string]any)
	if !ok {
		return nil, errors.New("the stage has no spec.selector")
	}
	annotation := fmt.Sprintf(".metadata.annotations[%q]", ReadyAtAnnotation)
	exprs, _ := selector["matchExpressions"].([]any)
	selector["matchExpressions"] = append(exprs, map[string]any{"key": annotation, "operator": "Exists"})
	// kwok takes a time for a delay as the wait until then.
	spec["delay"] = map[string]any{"durationFrom": map[string]any{"expressionFrom": annotation}}
	return yaml.Marshal(s)
}

// AddNodes registers more kwok nodes, for a test that needs nodes the
// rest of its package must not see, and waits until they are Ready. The
// test deletes them when done.
func (c *Cluster) AddNodes(ctx context.Context, nodes ...Node) error {
	return c.createNodes(ctx, nodes)
}

// createNodes registers kwok nodes, a few at a time (a scale test has a
// thousand), and waits until kwok reports them all Ready with a lease,
// and Pods may go there.
func (c *Cluster) createNodes(ctx context.Context, all []Node) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, n := range all {
		g.Go(func() error { return c.createNode(gctx, n) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return poll(ctx, fmt.Sprintf("%d kwok nodes to be Ready with a lease", len(all)), func(ctx context.Context) error {
		nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		// Without a renewed lease a node would be declared dead.
		leases, err := c.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready, leased := map[string]bool{}, map[string]bool{}
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				ready[n.Name] = ready[n.Name] || cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
			}
			// A node tainted not-ready or unreachable takes no Pods.
			for _, t := range n.Spec.Taints {
				if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
					ready[n.Name] = false
				}
			}
		}
		for _, l := range leases.Items {
			leased[l.Name] = true
		}
		for _, n := range all {
			if !ready[n.Name] || !leased[n.Name] {
				return fmt.Errorf("node %s is not Ready with a lease yet", n.Name)
			}
		}
		return nil
	})
}

// createNode registers one kwok node.
func (c *Cluster) createNode(ctx context.Context, n Node) error {
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
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "localhost"}, {Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
			// Ready from the start, as kwok keeps it: a node the node
			// lifecycle controller first sees without it is tainted
			// not-ready until it sees it Ready, a race with a test that
			// schedules onto it at once.
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}},
	}
	if _, err := c.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	return nil
}
