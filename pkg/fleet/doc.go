// Package fleet is the engine of a run: it sizes warm pools for a batch of
// tasks, places them over one or more clusters, warms them as the chosen
// strategy says, claims a sandbox per task, runs work in it, and tears
// everything of the run down — and nothing of any other run.
//
// # A run
//
// A run in Go, as `kubectl sandbox-fleet run` does it (error handling
// left out):
//
//	cfg, _ := config.Load("fleet.yaml")
//	ts, _ := tasks.Load([]string{"tasks.jsonl"}, nil, tasks.Options{Rewrite: cfg.Rewrite})
//	targets, _ := fleet.Targets(cfg, genericclioptions.NewConfigFlags(true))
//	f, _ := fleet.Open(ctx, "run-1", cfg, ts, targets, fleet.WithHeartbeat("my-driver", 0))
//	defer f.Close()
//	rep, _ := f.Run(ctx, fleet.RunOptions{Work: fleet.ExecWork([]string{"python3", "-m", "pytest", "-q"}, nil)})
//
// Run does all of it: preflight (when it fails, nothing was created and
// the error matches ErrNothingCreated), the run's heartbeat Lease, the
// pre-pull WithPrepull asks for, the passes, and the teardown.
//
// NewPlan says, from plain data, what such a run does; a trainer that
// owns its schedule uses package session instead of Run.
//
// # Sandboxes and their commands
//
// Work gets a *Sandbox: where it runs (its sandbox.Handle: claim, Pod,
// node, hostname) and what runs in it — Exec for one command with its
// timeout, OpenShell for a long-lived shell, Start for a process driven
// while it runs, PortForward for a port — with the request, result and
// event types of package exec.
//
// # Errors
//
// A task's failure has a verdict (package verdict): task when the work
// ran and failed, infra otherwise. The engine's errors about a sandbox are
// types to match with errors.As: StartError (its Pod could not start),
// LostError (it went under the task), VanishedError (its claim was
// deleted), WarmError (pools that could not become Ready), and
// TeardownError when what is left of a run could not be removed.
//
// # Logging
//
// What stops nothing — a pool serving with fewer sandboxes, a sandbox
// quarantined, the runaway breaker counting — goes to the logr.Logger of
// the context given to Open, as with controller-runtime; without one, to
// klog's. Each is a constant message with key/values (cluster, image,
// sandbox, ...) and failures an error, so that a log pipeline can count
// and filter them.
//
// Every wait is served by one shared informer per kind and cluster
// (pkg/fleet/internal/tracker); the engine never polls the API server and
// never opens a watch per object.
package fleet
