package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// The fault suite's handles on the cluster: it freezes, kills and
// restarts the components this package started — only those, by the
// process groups it holds, never by name.

// Component returns the running component name (kube-apiserver,
// agent-sandbox-controller, kubelet, ...), or nil.
func (c *Cluster) Component(name string) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// proc is the process now in component slot i.
func (c *Cluster) proc(i int) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[i]
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

// Kill kills component name outright (SIGKILL) and leaves it down —
// RestartingExited does not start it again — until Restart does: a
// component whose Pod is gone for good, or crash-loops for longer than a
// run waits.
func (c *Cluster) Kill(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name != name {
			continue
		}
		p.killed = true
		if !p.exited() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		return nil
	}
	return fmt.Errorf("no component %s in this cluster", name)
}

// Restart kills component name outright (SIGKILL, as a crash or an OOM
// kill would), starts it again with the same arguments, ports and log,
// and returns once it is as ready as it was at start-up.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	c.mu.Lock()
	p, err := c.replaceLocked(name)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	for _, pr := range p.probes {
		if err := p.poll(ctx, pr.what, pr.ready); err != nil {
			return err
		}
	}
	return nil
}

// replaceLocked kills component name if it runs and starts it again in
// its place. c.mu is held.
func (c *Cluster) replaceLocked(name string) (*Process, error) {
	if c.stopping {
		return nil, fmt.Errorf("restarting %s: the cluster is stopping", name)
	}
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
			return nil, err
		}
		p.probes = old.probes
		c.procs[i] = p
		return p, nil
	}
	return nil, fmt.Errorf("no component %s in this cluster", name)
}

// restartWhenExited looks at component slot i every second until the
// cluster stops, and starts again a process that has exited
// (RestartingExited): Restart holds c.mu from the kill to the new start,
// so a process found exited here exited on its own or could not be
// started again. Each restart is noted in the component's log.
func (c *Cluster) restartWhenExited(i int) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range tick.C {
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			return
		}
		if p := c.procs[i]; p.exited() && !p.killed {
			noteInLog(p.logPath, fmt.Sprintf("exited (%v); started again as its Pod would be", p.exitErr))
			if _, err := c.replaceLocked(p.name); err != nil {
				noteInLog(p.logPath, fmt.Sprintf("starting again: %v", err))
			}
		}
		c.mu.Unlock()
	}
}

func noteInLog(logPath, note string) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "--- test cluster, %s: %s\n", time.Now().Format(time.RFC3339), note)
}
