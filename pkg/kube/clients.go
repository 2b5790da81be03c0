// Package kube is the one place sandbox-fleet builds Kubernetes API clients:
// every command, controller and test gets its clients from here, so they all
// share one scheme, one set of rate limits and one user agent.
//
// controller-runtime's caches and clients log through its global logger,
// which keeps only the first logger a program sets: the program sets it
// (sandbox-fleet's commands send it to klog, so -v governs it with
// client-go's), never a package it imports.
package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/version"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// Scheme knows the built-in kinds, the Agent Sandbox v1beta1 kinds and
// sandbox-fleet.io/v1alpha1 (SandboxPolicy).
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(sandboxv1beta1.AddToScheme(Scheme))
	utilruntime.Must(extensionsv1beta1.AddToScheme(Scheme))
	utilruntime.Must(v1alpha1.AddToScheme(Scheme))
}

// Clients holds the API clients for one cluster and the namespace to work in.
type Clients struct {
	Config *rest.Config
	Kube   kubernetes.Interface
	// Client reads and writes any kind in Scheme, Agent Sandbox kinds included.
	Client    client.WithWatch
	Namespace string
	// Throttle is the rate limiter Config gives every client built from
	// it; it says how long it delayed requests.
	Throttle *Throttle
	// Requests counts what every client built from Config sends.
	Requests *Requests
}

// In returns the same clients working in namespace.
func (c *Clients) In(namespace string) *Clients {
	in := *c
	in.Namespace = namespace
	return &in
}

// FromFlags builds Clients from kubectl-style flags (--kubeconfig, --context,
// -n, --as, ...). The namespace is the -n flag, else the context's, else
// "default".
func FromFlags(getter genericclioptions.RESTClientGetter, limits Limits) (*Clients, error) {
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	ns, _, err := getter.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return forConfig(cfg, ns, limits)
}

// ForConfig builds Clients from a rest.Config with the default limits. It
// copies cfg before tuning it.
func ForConfig(cfg *rest.Config, namespace string) (*Clients, error) {
	return forConfig(cfg, namespace, Limits{})
}

func forConfig(cfg *rest.Config, namespace string, limits Limits) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	// One token bucket for every client built from cfg — these and the
	// informers callers start — so the limits hold for the process's use
	// of the cluster, not for each client apart.
	limits = limits.orDefaults()
	throttle := newThrottle(limits)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = limits.QPS, limits.Burst, throttle
	requests := &Requests{}
	cfg.Wrap(requests.wrap)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sandbox-fleet/" + version.Get().GitVersion
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, fmt.Errorf("building the Agent Sandbox client: %w", err)
	}
	if namespace == "" {
		namespace = "default"
	}
	return &Clients{Config: cfg, Kube: kc, Client: c, Namespace: namespace, Throttle: throttle, Requests: requests}, nil
}

// Target names a cluster the way a fleet configuration does.
type Target struct {
	// Kubeconfig is a kubeconfig path; empty uses $KUBECONFIG or ~/.kube/config.
	Kubeconfig string
	// Context is a context of that kubeconfig; empty uses its current one.
	Context string
	// InCluster uses the service account of the Pod this runs in.
	InCluster bool
	// Namespace overrides the context's namespace.
	Namespace string
	Limits    Limits
}

// ForTarget builds Clients for one cluster of a fleet.
func ForTarget(t Target) (*Clients, error) {
	if t.InCluster {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration: %w", err)
		}
		return forConfig(cfg, t.Namespace, t.Limits)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if t.Kubeconfig != "" {
		rules.ExplicitPath = t.Kubeconfig
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: t.Context})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %q context %q: %w", t.Kubeconfig, t.Context, err)
	}
	ns := t.Namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return nil, fmt.Errorf("reading the namespace of context %q: %w", t.Context, err)
		}
	}
	return forConfig(cfg, ns, t.Limits)
}
