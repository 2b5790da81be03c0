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
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// kwokNodeAnnotation marks the nodes a kwok manages, so that a real
// kubelet's node in the same cluster is left alone: the cluster's own kwok
// manages those marked clusterKwok, a Kwok started on an existing cluster
// those marked with a value of its own.
const (
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	clusterKwok        = "fake"
)

func (c *Cluster) startKwok(port int) (waitFunc, error) {
	configPath, err := writeKwokConfig(c.bins, c.dir, c.opts.pullDelays)
	if err != nil {
		return nil, err
	}
	p, err := c.run("kwok", kwokArgs(c.Kubeconfig(), configPath, port, clusterKwok))
	if err != nil {
		return nil, err
	}
	return kwokServes(p, port), nil
}

// writeKwokConfig writes the one configuration file kwok takes, holding
// all its stages, into dir and returns its path. With pullDelays, Pods
// become Ready at the time their ReadyAtAnnotation holds.
func writeKwokConfig(bins binaries, dir string, pullDelays bool) (string, error) {
	stages, err := bins.kwokStageFiles()
	if err != nil || len(stages) == 0 {
		return "", fmt.Errorf("kwok stages missing from %s: rerun `make testbin`", bins.dir)
	}
	var config []byte
	for _, s := range stages {
		b, err := os.ReadFile(s)
		if err != nil {
			return "", err
		}
		if pullDelays && filepath.Base(s) == "pod-ready.yaml" {
			if b, err = readyAtAnnotated(b); err != nil {
				return "", fmt.Errorf("%s: %w", s, err)
			}
		}
		config = append(config, "---\n"...)
		config = append(config, b...)
		config = append(config, '\n')
	}
	configPath := filepath.Join(dir, "kwok.yaml")
	return configPath, os.WriteFile(configPath, config, 0o644)
}

// kwokArgs are kwok's flags: it manages only the nodes this package
// creates annotated managed, and serves their kubelet endpoints on
// loopback at port.
func kwokArgs(kubeconfig, configPath string, port int, managed string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + configPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=" + managed,
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
	}
}

func kwokServes(p *Process, port int) waitFunc {
	return func(ctx context.Context) error {
		return p.waitFor(ctx, "healthz", httpOK(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", port)))
	}
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
	return createNodes(ctx, c.kube, clusterKwok, nodes)
}

// createNodes registers kwok nodes for the kwok that manages those
// annotated managed, a few at a time (a scale test has a thousand), and
// waits until kwok reports them all Ready with a lease,
// and Pods may go there.
func createNodes(ctx context.Context, kube kubernetes.Interface, managed string, all []Node) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, n := range all {
		g.Go(func() error { return createNode(gctx, kube, managed, n) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return poll(ctx, fmt.Sprintf("%d kwok nodes to be Ready with a lease", len(all)), func(ctx context.Context) error {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		// Without a renewed lease a node would be declared dead.
		leases, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
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
func createNode(ctx context.Context, kube kubernetes.Interface, managed string, n Node) error {
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
			Annotations: map[string]string{kwokNodeAnnotation: managed},
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
	if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	return nil
}

// Kwok is kwok run against a cluster this package did not start (an
// existing one, such as kind's), for a test that needs nodes of its own
// there: it manages only the nodes its AddNodes creates, and Stop deletes
// them.
type Kwok struct {
	kube    kubernetes.Interface
	proc    *Process
	managed string
	nodes   []string
}

// StartKwok starts kwok from the test binaries (`make testbin`) against
// the cluster kubeconfig names, with its configuration and log in dir,
// and waits until it serves. Like the cluster's components it dies with
// this process; Stop stops it before.
func StartKwok(ctx context.Context, kubeconfig, dir string) (*Kwok, error) {
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	configPath, err := writeKwokConfig(bins, dir, false)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// A value of its own: a kwok already running in the cluster (the local
	// cluster's) leaves these nodes to this one.
	managed := "test-" + strconv.Itoa(os.Getpid())
	p, err := startProcess("kwok", bins.bin("kwok"), kwokArgs(kubeconfig, configPath, port, managed), nil, dir, false, nil)
	if err != nil {
		return nil, err
	}
	if err := kwokServes(p, port)(ctx); err != nil {
		return nil, errors.Join(err, p.Stop())
	}
	return &Kwok{kube: kube, proc: p, managed: managed}, nil
}

// AddNodes registers kwok nodes and waits until they are Ready.
func (k *Kwok) AddNodes(ctx context.Context, nodes ...Node) error {
	for _, n := range nodes {
		k.nodes = append(k.nodes, n.Name)
	}
	return createNodes(ctx, k.kube, k.managed, nodes)
}

// Stop deletes the nodes AddNodes registered and stops kwok. The Pods
// bound to them are the cluster's to collect, as for any node deleted.
func (k *Kwok) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, n := range k.nodes {
		if err := k.kube.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting node %s: %w", n, err))
		}
	}
	return errors.Join(append(errs, k.proc.Stop())...)
}
