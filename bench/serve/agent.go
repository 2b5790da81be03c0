package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testpython"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// agentShape is the agent-loop shape: Rollouts sandboxes at once, each
// running Commands small commands one after another.
type agentShape struct{ Rollouts, Commands int }

// agentCommands are the loop's commands in turn, as argv (exec) and as a
// script (shell): an agent's look at a repository.
var agentCommands = [][]string{{"cat", "/etc/passwd"}, {"ls", "-la", "/"}, {"grep", "-n", "root", "/etc/passwd"}, {"echo", "turn"}}

// agentConfig is the fleet of the agent loop: one pool as large as the
// rollouts, small requests, so that they fit on the one real node.
func agentConfig(sh agentShape) config.Fleet {
	fc := config.Default()
	fc.MaxConcurrent, fc.MaxWarmPoolSize, fc.WarmPerTask = sh.Rollouts, sh.Rollouts, true
	fc.ReadyTimeout.Duration = 10 * time.Minute
	fc.Template.Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	return fc
}

// runAgent measures the agent loop on the real node: the Python trainer
// through serve over a shell and over an exec per command, and the same
// loop of execs by Go on the session in process (no server), each round.
func runAgent(ctx context.Context, rounds int, sh agentShape) error {
	c, err := testcluster.Start(ctx, testcluster.WithRealNode(), testcluster.WithNodes())
	if err != nil {
		return err
	}
	defer c.Stop(false)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	here, err := benchDir()
	if err != nil {
		return err
	}
	fmt.Printf("agent loop: %d rollouts at once × %d commands each (%d a round each way), %d rounds, real node\n",
		sh.Rollouts, sh.Commands, sh.Rollouts*sh.Commands, rounds)
	childArgs := func(child, ns string, extra ...string) []string {
		return append([]string{"-shape", "agent", "-child", child, "-kubeconfig", c.Kubeconfig(), "-namespace", ns,
			"-rollouts", fmt.Sprint(sh.Rollouts), "-commands", fmt.Sprint(sh.Commands), "-rounds", fmt.Sprint(rounds)}, extra...)
	}
	// Through serve: one session, its sandboxes held over every round.
	ns, err := newNamespace(ctx, c)
	if err != nil {
		return err
	}
	sock, cleanup, err := socketPath("bench-agent")
	if err != nil {
		return err
	}
	defer cleanup()
	server, err := startLines(ctx, self, childArgs("serve", ns, "-socket", sock)...)
	if err != nil {
		return err
	}
	defer server.stop()
	if _, err := server.line(); err != nil {
		return err
	}
	trainer := exec.CommandContext(ctx, testpython.Python(), filepath.Join(here, "agent.py"), "unix://"+sock, testimages.Busybox,
		fmt.Sprint(sh.Rollouts), fmt.Sprint(sh.Commands), fmt.Sprint(rounds))
	trainer.Stderr = os.Stderr
	next, err := trainer.StdinPipe()
	if err != nil {
		return err
	}
	out, err := trainer.StdoutPipe()
	if err != nil {
		return err
	}
	if err := trainer.Start(); err != nil {
		return err
	}
	defer func() {
		next.Close()
		_ = trainer.Wait()
	}()
	tl := &lines{cmd: trainer, out: newScanner(out)}
	if l, err := tl.line(); err != nil || l != "start" {
		return fmt.Errorf("agent.py: %q, %v", l, err)
	}
	all := map[string][]result{}
	for range 2 * rounds {
		before, err := server.probe()
		if err != nil {
			return err
		}
		if _, err := io.WriteString(next, "\n"); err != nil {
			return err
		}
		l, err := tl.line()
		if err != nil {
			return err
		}
		after, err := server.probe()
		if err != nil {
			return err
		}
		var res struct {
			Mode string `json:"mode"`
			result
		}
		if err := json.Unmarshal([]byte(l), &res); err != nil {
			return fmt.Errorf("agent.py: %w: %s", err, l)
		}
		res.ServerCPU = after.CPU - before.CPU
		name := "python-serve-" + res.Mode
		all[name] = append(all[name], res.result)
		printAgentRow(len(all[name]), name, res.result)
	}
	// The trainer releases its sandboxes and the session tears down before
	// the next loop starts, so that neither overlaps it.
	next.Close()
	if err := trainer.Wait(); err != nil {
		return fmt.Errorf("agent.py: %w", err)
	}
	server.stop()
	// In process: the same loop of execs, no server.
	ns, err = newNamespace(ctx, c)
	if err != nil {
		return err
	}
	engine, err := startLines(ctx, self, childArgs("agent-engine", ns)...)
	if err != nil {
		return err
	}
	defer engine.stop()
	for r := range rounds {
		l, err := engine.line()
		if err != nil {
			return err
		}
		var res result
		if err := json.Unmarshal([]byte(l), &res); err != nil {
			return err
		}
		all["go-engine-exec"] = append(all["go-engine-exec"], res)
		printAgentRow(r+1, "go-engine-exec", res)
	}
	agentReport(all)
	return nil
}

func printAgentRow(round int, name string, r result) {
	fmt.Printf("round %d %-20s p50 %6.1f ms  p99 %6.1f ms  trainer CPU %5.2f ms/command  serve CPU %5.2f ms/command\n",
		round, name, 1000*stats.Percentile(r.Latencies, 0.50), 1000*stats.Percentile(r.Latencies, 0.99),
		1000*r.CPU/float64(r.Tasks), 1000*r.ServerCPU/float64(r.Tasks))
}

// agentChild runs the session's part of the agent loop: serve, or the
// engine's loop in process (its results one line a round).
func agentChild(ctx context.Context, child string, s *session.Session, socket string, sh agentShape, rounds int, requests *atomic.Int64) error {
	if child == "serve" {
		return serveSession(ctx, s, socket, requests)
	}
	if _, err := warmAll(ctx, s); err != nil {
		return err
	}
	ts := agentTasks(sh)
	handles := make([]*session.Handle, len(ts))
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	for i, t := range ts {
		wg.Go(func() {
			h, err := s.Acquire(ctx, session.AcquireRequest{ClientID: "go", TaskID: t.ID})
			mu.Lock()
			defer mu.Unlock()
			handles[i], failed = h, cmpErr(failed, err)
		})
	}
	wg.Wait()
	if failed != nil {
		return failed
	}
	for range rounds {
		cpu, start := cpuSeconds(), time.Now()
		per := make([][]float64, len(handles))
		for i, h := range handles {
			wg.Go(func() {
				for n := range sh.Commands {
					t := time.Now()
					res, err := s.Exec(ctx, h.Claim, "go", session.ExecRequest{Argv: agentCommands[n%len(agentCommands)], Stdout: io.Discard, Stderr: io.Discard})
					if err != nil || res.ExitCode != 0 {
						mu.Lock()
						failed = cmpErr(failed, fmt.Errorf("exec: exit %d, %v", res.ExitCode, err))
						mu.Unlock()
						return
					}
					per[i] = append(per[i], time.Since(t).Seconds())
				}
			})
		}
		wg.Wait()
		if failed != nil {
			return failed
		}
		res := result{Wall: time.Since(start).Seconds(), CPU: cpuSeconds() - cpu}
		for _, p := range per {
			res.Latencies = append(res.Latencies, p...)
		}
		res.Tasks = len(res.Latencies)
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			return err
		}
	}
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func agentTasks(sh agentShape) []tasks.Task {
	ts := make([]tasks.Task, sh.Rollouts)
	for i := range ts {
		ts[i] = tasks.Task{ID: fmt.Sprintf("r%d", i), Image: testimages.Busybox}
	}
	return ts
}

// agentReport prints each way's medians over the rounds and the ratios:
// serve's added latency per command (serve's exec against the engine's),
// and shell ÷ exec through serve, per round and their median.
func agentReport(all map[string][]result) {
	ways := []string{"python-serve-shell", "python-serve-exec", "go-engine-exec"}
	fmt.Printf("\nmedians over the rounds\n%-20s %9s %9s %22s %20s\n", "way", "p50 ms", "p99 ms", "trainer CPU ms/command", "serve CPU ms/command")
	for _, w := range ways {
		var p50, p99, cpu, server []float64
		for _, r := range all[w] {
			p50, p99 = append(p50, stats.Percentile(r.Latencies, 0.50)), append(p99, stats.Percentile(r.Latencies, 0.99))
			cpu, server = append(cpu, r.CPU/float64(r.Tasks)), append(server, r.ServerCPU/float64(r.Tasks))
		}
		fmt.Printf("%-20s %9.1f %9.1f %22.2f %20.2f\n", w, 1000*stats.Median(p50), 1000*stats.Median(p99), 1000*stats.Median(cpu), 1000*stats.Median(server))
	}
	per := map[string][]float64{}
	names := []string{"shell/exec p50", "shell/exec p99", "serve added p50 ms", "serve added p99 ms"}
	for i := range all["go-engine-exec"] {
		sh, ex, en := all["python-serve-shell"][i], all["python-serve-exec"][i], all["go-engine-exec"][i]
		q := func(r result, p float64) float64 { return stats.Percentile(r.Latencies, p) }
		for j, v := range []float64{q(sh, 0.5) / q(ex, 0.5), q(sh, 0.99) / q(ex, 0.99), 1000 * (q(ex, 0.5) - q(en, 0.5)), 1000 * (q(ex, 0.99) - q(en, 0.99))} {
			per[names[j]] = append(per[names[j]], v)
		}
	}
	printPerRound("per round, and their median (target: shell/exec p50 ≤ 0.3)", names, per)
}
