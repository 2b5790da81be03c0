// Package testscheduler runs the built asrl-scheduler beside the test
// cluster's own kube-scheduler, with the configuration the manifests ship
// (manifests/scheduler/scheduler-config.yaml), for the plugin's tests,
// the end-to-end suite and the scheduling benchmark.
package testscheduler

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
)

// SchedulerName is the profile with NodeCacheLocality in the shipped
// configuration.
const SchedulerName = "sandbox-fleet-scheduler"

// Build builds asrl-scheduler into dir.
func Build(dir string) (string, error) {
	return testcluster.BuildCommand(dir, "asrl-scheduler")
}

// Scheduler is a running asrl-scheduler.
type Scheduler struct {
	*testcluster.Process
	// URL is where it serves /healthz, /readyz and /metrics over TLS
	// (a self-signed certificate; /metrics wants credentials allowed
	// it, such as the cluster's admin's).
	URL string
}

// Start runs the built scheduler bin for cluster c with the shipped
// configuration — as its ServiceAccount, with the shipped RBAC and Go
// heap limit, without leader election, and changed by edit if not nil — on cpus if any, and returns
// once it serves /readyz. It stops with the cluster, or with Stop.
func Start(ctx context.Context, c *testcluster.Cluster, bin string, edit func(*configv1.KubeSchedulerConfiguration), cpus ...int) (*Scheduler, error) {
	shipped, err := Config()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(shipped)
	if err != nil {
		return nil, err
	}
	cfg := &configv1.KubeSchedulerConfiguration{}
	if err := yaml.UnmarshalStrict(b, cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", shipped, err)
	}
	kubeconfig, err := shippedRBAC(ctx, c)
	if err != nil {
		return nil, err
	}
	cfg.ClientConnection.Kubeconfig = kubeconfig
	cfg.LeaderElection.LeaderElect = ptr.To(false)
	if edit != nil {
		edit(cfg)
	}
	if b, err = yaml.Marshal(cfg); err != nil {
		return nil, err
	}
	config := filepath.Join(c.Dir(), "asrl-scheduler.yaml")
	if err := os.WriteFile(config, b, 0o600); err != nil {
		return nil, err
	}
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	// Its self-signed serving certificate goes with the cluster's files.
	certs, err := os.MkdirTemp(c.Dir(), "asrl-scheduler-")
	if err != nil {
		return nil, err
	}
	env, err := testcluster.ShippedGOMEMLIMIT("manifests/scheduler/deployment.yaml")
	if err != nil {
		return nil, err
	}
	p, err := c.StartProcess("asrl-scheduler", bin, []string{
		"--config=" + config,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[0]), "--cert-dir=" + certs,
	}, cpus, env...)
	if err != nil {
		return nil, err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	if err := ready(ctx, url+"/readyz"); err != nil {
		err = fmt.Errorf("asrl-scheduler not ready (its log: %s): %w", filepath.Join(c.LogDir(), "asrl-scheduler.log"), err)
		return nil, errors.Join(err, p.Stop())
	}
	return &Scheduler{Process: p, URL: url}, nil
}

// shippedRBAC creates manifests/scheduler/rbac.yaml in kube-system, as
// `kubectl apply -k manifests/scheduler` does (what an earlier scheduler
// of the cluster created is kept), and returns a kubeconfig of the
// scheduler's ServiceAccount: it runs with the rights the manifests give
// it and no more.
func shippedRBAC(ctx context.Context, c *testcluster.Cluster) (string, error) {
	const path = "manifests/scheduler/rbac.yaml"
	objs, err := testcluster.ShippedRBAC(path)
	if err != nil {
		return "", err
	}
	clients, err := c.Clients(metav1.NamespaceSystem)
	if err != nil {
		return "", err
	}
	for _, obj := range objs {
		namespaced, err := clients.Client.IsObjectNamespaced(obj)
		if err != nil {
			return "", fmt.Errorf("%s: %s: %w", path, obj.GetName(), err)
		}
		if namespaced {
			obj.SetNamespace(metav1.NamespaceSystem)
		}
		if err := clients.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("%s: creating %s: %w", path, obj.GetName(), err)
		}
	}
	return c.ServiceAccountKubeconfig(ctx, metav1.NamespaceSystem, "asrl-scheduler")
}

// Config is the shipped configuration, manifests/scheduler/scheduler-config.yaml.
func Config() (string, error) {
	root, err := testcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "manifests", "scheduler", "scheduler-config.yaml"), nil
}

// BoundTo waits for pod to be bound and returns its node.
func BoundTo(ctx context.Context, c client.Client, pod *corev1.Pod) (string, error) {
	var node string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err
		}
		node = got.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("Pod %s was not scheduled: %w", pod.Name, err)
	}
	return node, nil
}

// ready waits for url to answer 200.
func ready(ctx context.Context, url string) error {
	// The scheduler's serving certificate is self-signed; only that it
	// answers matters here.
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
