package fleet

import (
	"fmt"

	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// Targets builds the clients of cfg's clusters. Without clusters in cfg the
// fleet is the one cluster of the kubectl flags, named after its context.
// A namespace given on the command line applies to every cluster whose
// configuration names none.
func Targets(cfg config.Fleet, flags *genericclioptions.ConfigFlags) ([]Target, error) {
	limits := kube.Limits{QPS: cfg.KubeAPIQPS, Burst: cfg.KubeAPIBurst}
	if len(cfg.Clusters) == 0 {
		clients, err := kube.FromFlags(flags, limits)
		if err != nil {
			return nil, err
		}
		name := "default"
		if flags.Context != nil && *flags.Context != "" {
			name = *flags.Context
		} else if raw, err := flags.ToRawKubeConfigLoader().RawConfig(); err == nil && raw.CurrentContext != "" {
			name = raw.CurrentContext
		}
		return []Target{{Config: config.Cluster{Name: name, Weight: 1}, Clients: clients}}, nil
	}
	namespace := ""
	if flags.Namespace != nil {
		namespace = *flags.Namespace
	}
	var out []Target
	for _, c := range cfg.Clusters {
		ns := c.Namespace
		if ns == "" {
			ns = namespace
		}
		clients, err := kube.ForTarget(kube.Target{Kubeconfig: c.Kubeconfig, Context: c.Context, InCluster: c.InCluster, Namespace: ns, Limits: limits})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		out = append(out, Target{Config: c, Clients: clients})
	}
	return out, nil
}
