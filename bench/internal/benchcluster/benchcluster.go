// Package benchcluster starts what a benchmark measures on: a working
// directory with the components the benchmark builds there as they ship,
// a test control plane with kwok nodes, and a client of it allowed the
// request rate the benchmark needs. Stop removes all of it.
package benchcluster

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// Options say what a benchmark starts.
type Options struct {
	// Build, when set, builds into the directory what the benchmark runs
	// as shipped, before the cluster starts.
	Build func(dir string) error
	// Pin keeps this process and the control plane on CPU 0, so that the
	// other CPUs are the measured component's alone.
	Pin bool
	// Cluster are the test cluster's options: its nodes first of all.
	Cluster []testcluster.Option
	// QPS and Burst of the client; 0 keeps the clients' defaults.
	QPS   float32
	Burst int
}

// Bench is a started benchmark environment.
type Bench struct {
	Dir     string
	Cluster *testcluster.Cluster
	Clients *kube.Clients
}

// Start makes a directory for the benchmark name, builds what o asks for
// into it, and starts the cluster and its client. On failure nothing is
// left.
func Start(ctx context.Context, name string, o Options) (_ *Bench, err error) {
	dir, err := os.MkdirTemp("", "bench-"+name+"-")
	if err != nil {
		return nil, err
	}
	b := &Bench{Dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.Stop())
		}
	}()
	if o.Build != nil {
		if err := o.Build(dir); err != nil {
			return nil, err
		}
	}
	cluster := o.Cluster
	if o.Pin {
		if err := testcluster.PinThisProcess(0); err != nil {
			return nil, err
		}
		cluster = append(cluster, testcluster.WithCPUs(0))
	}
	fmt.Fprintf(os.Stderr, "%s: starting a test cluster\n", name)
	if b.Cluster, err = testcluster.Start(ctx, cluster...); err != nil {
		return nil, err
	}
	cfg := b.Cluster.RESTConfig()
	if o.QPS > 0 {
		cfg.QPS, cfg.Burst = o.QPS, o.Burst
	}
	if b.Clients, err = kube.ForConfig(cfg, ""); err != nil {
		return nil, err
	}
	return b, nil
}

// Stop stops the cluster and removes the directory.
func (b *Bench) Stop() error {
	var err error
	if b.Cluster != nil {
		err = b.Cluster.Stop(false)
	}
	return errors.Join(err, os.RemoveAll(b.Dir))
}
