package testcluster

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// The fault suite's handles on the cluster: it freezes, kills and
// restarts the components this package started — only those, by the
// process groups it holds, never by name.

// Component returns the running component name (kube-apiserver,
// agent-sandbox-controller, kubelet, ...), or nil.
func (c *Cluster) Component(name string) *Process {
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// Freeze stops the process and its group (SIGSTOP), as a stalled machine
// or a process stuck in a long pause would be: connections stay open and
// nothing answers. Thaw lets it go on.
func (p *Process) Freeze() error { return p.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process (SIGCONT).
func (p *Process) Thaw() error { return p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("%s has exited", p.name)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	return nil
}

// Restart kills component name outright (SIGKILL, as a crash or an OOM
// kill would), starts it again with the same arguments, ports and log,
// and returns once it is as ready as it was at start-up.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	for i, old := range c.procs {
		if old.name != name {
			continue
		}
		if !old.exited() {
			_ = syscall.Kill(-old.cmd.Process.Pid, syscall.SIGKILL)
			<-old.done
		}
		p, err := old.start()
		if err != nil {
			return err
		}
		p.probes = old.probes
		c.procs[i] = p
		for _, pr := range p.probes {
			if err := p.poll(ctx, pr.what, pr.ready); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("no component %s in this cluster", name)
}
