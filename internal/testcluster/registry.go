package testcluster

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
)

func (c *Cluster) startRegistry(ctx context.Context) error {
	addr, err := registryAddr()
	if err != nil {
		return err
	}
	c.node.Registry = addr
	args := registryArgs(addr, filepath.Join(c.node.Dir, "registry"))
	if c.opts.registryLink > 0 {
		args = append(args, "--link-bytes-per-second="+strconv.Itoa(c.opts.registryLink))
	}
	p, err := c.run("registry", args)
	if err != nil {
		return err
	}
	return registryServes(ctx, p, addr)
}

// StartRegistry starts the test registry of the test binaries (`make
// testbin`) on a free loopback port, with its blobs and log in dir, for a
// program that needs it without a cluster of this package (e2e/kind), and
// returns its host:port once it serves. Like the cluster's components it
// dies with this process; Stop stops it before.
func StartRegistry(ctx context.Context, dir string) (string, *Process, error) {
	bins, err := findBinaries()
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	addr, err := registryAddr()
	if err != nil {
		return "", nil, err
	}
	p, err := startProcess("registry", bins.bin("registry"), registryArgs(addr, filepath.Join(dir, "blobs")), nil, dir, false, nil)
	if err != nil {
		return "", nil, err
	}
	if err := registryServes(ctx, p, addr); err != nil {
		return "", nil, errors.Join(err, p.Stop())
	}
	return addr, p, nil
}

func registryAddr() (string, error) {
	port, err := freePort()
	return "127.0.0.1:" + strconv.Itoa(port), err
}

func registryArgs(addr, blobs string) []string {
	return []string{"--addr=" + addr, "--blobs=" + blobs}
}

func registryServes(ctx context.Context, p *Process, addr string) error {
	return p.waitFor(ctx, "healthz", httpOK(http.DefaultClient, "http://"+addr+"/healthz"))
}
