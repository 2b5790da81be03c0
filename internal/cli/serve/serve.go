// Package serve implements `kubectl sandbox-fleet serve`.
package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/interrupt"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/runid"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/internal/serve"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	inputs      inputs.Flags
	runID       string
	resume      string
	session     string
	detach      bool
	accounts    []string
	audience    string
	access      serve.Access
	tokenFile   string
	metricsAddr string
	opts        session.Options
}

// NewCommand returns the serve verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	o.inputs.TasksOptional = true
	cmd := &cobra.Command{
		Use:     "serve [-f fleet.yaml] [--tasks FILE...] [--listen ADDR]",
		Short:   "Serve a long-lived fleet session that a training loop drives (Python: sandbox_fleet)",
		Long:    long,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, ts, err := o.complete(cmd)
			if err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			if o.access.Address == "" {
				// A directory of a fresh name that only this user may
				// enter, so nobody can put a socket of their own there.
				dir, err := os.MkdirTemp("", "sandbox-fleet-"+o.runID+"-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				o.access.Address = filepath.Join(dir, "serve.sock")
			}
			return o.run(cmd.Context(), cfg, ts)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *options) addFlags(f *pflag.FlagSet) {
	o.inputs.AddFlags(f)
	f.StringVar(&o.runID, "run-id", "", "id labelling everything the session creates (default: generated)")
	f.StringVar(&o.resume, "resume", "", "take over the session of this run id, whose serve died: its pools, held sandboxes and clients")
	f.StringVar(&o.session, "session-name", "", "the session of this name (its run id): resumed when it exists, started otherwise; for serve in a Deployment")
	f.BoolVar(&o.detach, "detach-on-signal", false, "on SIGTERM or SIGINT leave the session for the next serve --session-name or --resume to take over, instead of tearing it down")
	f.StringArrayVar(&o.accounts, "allow-service-account", nil, "admit callers by their Pods' ServiceAccount tokens (a TokenReview each, kept 30s): NAMESPACE/NAME, or NAMESPACE/* for a namespace's; repeatable")
	f.StringVar(&o.audience, "token-audience", serve.DefaultAudience, "with --allow-service-account, the audience callers' tokens must be for (a projected ServiceAccount token)")
	f.StringVar(&o.access.Address, "listen", "", "unix:///PATH or a socket path, or HOST:PORT (default: a unix socket in a new private temporary directory, printed at start)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token every call must carry (mode 0600; written with a fresh token if it does not exist); TCP always has one")
	f.StringVar(&o.access.CertFile, "tls-cert-file", "", "serve TLS with this certificate")
	f.StringVar(&o.access.KeyFile, "tls-key-file", "", "the private key of --tls-cert-file")
	f.DurationVar(&o.opts.LeaseTTL, "lease-ttl", session.DefaultLeaseTTL, "a client's sandboxes are released this long after its last call")
	f.DurationVar(&o.opts.WarmTTL, "warm-ttl", session.DefaultWarmTTL, "a pool nobody asked for this long, with no sandbox held, is removed")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at this address, e.g. 127.0.0.1:9095: the session's acquires, commands, releases, clients, held sandboxes and pools, and the engine's claims and phases; off loopback over TLS (--tls-cert-file) to tokens allowed /metrics")
	f.BoolVar(&o.opts.Prepull, "prepull", false, "have the nodes with asrl-prepull-agent pull each image as its first task is added (a PrepullJob per cluster, deleted at the end)")
	inputs.AddPrepullHighWater(f, &o.opts.PrepullHighWater)
	inputs.AddHeartbeat(f, &o.opts.Heartbeat, "session")
}

const long = `Serve runs one fleet session — one run id, preflight first, everything torn
down at the end — and serves the fleet session API (api/fleet/v1/fleet.proto)
for a training loop to drive: add tasks, warm their pools ahead of need, acquire
a sandbox, exec in it, move files in and out, release it. The Python client
(clients/python, import sandbox_fleet) and the Go client (fleetv1connect) speak
it; so does anything that can POST JSON.

The API is served on a unix socket (mode 0600, in a directory only you may
write) by default, whose address is printed at start. TCP always takes a bearer
token (every call carries "Authorization: Bearer TOKEN"), since every user of
the machine can reach a port: --token-file names the file holding it — serve
writes a fresh one there (mode 0600) if it does not exist, and without the
flag into a new private directory, printed at start. An address beyond loopback
also needs TLS (--tls-cert-file and --tls-key-file).

Each client names itself with a client id and a key of its own (the
Sandbox-Fleet-Client-Key header; the Python client makes one up): the first
call binds the id to the key, so no other caller can act on its sandboxes.
Only the session's owner, the first client to call it, may Close it.

Every sandbox is leased to the client that acquired it: a client that makes
no call for --lease-ttl (the trainer crashed or was preempted) loses its
sandboxes, and they are released. A pool nobody asked for within --warm-ttl,
and with no sandbox held, is removed.

SIGINT, SIGTERM or a client's Close tear the session down; a second signal
exits at once and prints how to reap what is left.

A session outlives its process: --resume RUN_ID takes over one whose serve
died (killed, out of memory, its node or Pod gone). It reads back what the
session recorded in its namespace (configuration, options, tasks, clients)
and finds its pools and held sandboxes by their labels: pools are kept as
they are, each held sandbox goes back to its client while that client's lease
runs (and is released once it ran out), and a client that reconnects with its
id and key finds its handles. A serve of the session still renewing its
heartbeat is waited for.

To run serve in a cluster, as a Deployment in a namespace of the session's
own, apart from the trainer's (see manifests/serve and
docs/python-client.md): --session-name NAME resumes the
session of that name when it exists and starts it otherwise, so that a
replaced Pod carries on; --detach-on-signal leaves the session to the next
Pod on SIGTERM instead of tearing it down (a client's Close still does);
and --allow-service-account admits callers by their Pods' ServiceAccount
tokens, reviewed by the API server (TokenReview) for --token-audience,
instead of a token file.`

const example = `  # serve on a unix socket, with the tasks of a file in the plan
  kubectl sandbox-fleet serve -f fleet.yaml --tasks swebench.jsonl

  # serve on loopback TCP for a trainer on this machine, the token in a file
  kubectl sandbox-fleet serve -f fleet.yaml --listen 127.0.0.1:7070 --token-file ~/.sandbox-fleet-token

  # take over that session after its serve died, at the same address
  kubectl sandbox-fleet serve --resume run-20261205-120000-abc123 --listen 127.0.0.1:7070 --token-file ~/.sandbox-fleet-token`

func (o *options) run(parent context.Context, cfg config.Fleet, ts []tasks.Task) error {
	if len(o.accounts) > 0 {
		clients, err := kube.FromFlags(o.configFlags, kube.Limits{})
		if err != nil {
			return err
		}
		o.access.Kube = &serve.KubeAuth{Reviews: clients.Kube.AuthenticationV1().TokenReviews(), Audience: o.audience, Allowed: o.accounts}
	}
	// Listen first: a bad address must fail before anything is created.
	tokenFile, removeToken, err := serve.ResolveToken(&o.access, o.tokenFile)
	defer removeToken()
	if err != nil {
		return usage.Errorf("%w", err)
	}
	l, addr, err := serve.Listen(o.access)
	if err != nil {
		return usage.Errorf("%w", err)
	}
	defer l.Close()
	targets, err := fleet.Targets(cfg, o.configFlags)
	if err != nil {
		return err
	}
	ctx, cancel := interrupt.Context(parent)
	defer cancel(nil)
	onSignal := fmt.Sprintf("closing session %s and tearing it down", o.runID)
	if o.detach {
		onSignal = fmt.Sprintf("leaving session %s for serve --session-name %s (or --resume) to take over", o.runID, o.runID)
	}
	stopSignals := interrupt.Handle(o.streams.ErrOut, cancel, onSignal,
		func() string { return runid.ReapHint(o.runID, o.inputs.ConfigFile, targets) })
	defer stopSignals()

	if err := o.serveMetrics(ctx, cfg.Strategy); err != nil {
		return err
	}
	s, err := o.open(ctx, cfg, ts, targets)
	if err != nil {
		return err
	}
	v := serve.NewService(s)
	guard := ""
	switch {
	case tokenFile != "":
		guard = " (bearer token in " + tokenFile + ")"
	case o.access.Kube != nil:
		guard = " (to the ServiceAccounts " + strings.Join(o.accounts, ", ") + ")"
	}
	fmt.Fprintf(o.streams.ErrOut, "session %s: %d tasks, serving at %s%s\n", o.runID, s.TaskCount(), addr, guard)
	fmt.Fprintf(o.streams.Out, "%s\n", addr)
	serveErr := serve.Serve(ctx, l, v, o.access)
	return o.finish(ctx, s, v, serveErr, cfg.ReadyTimeout.Duration, targets)
}

// serveMetrics has the session's metrics recorded, and served at
// --metrics-addr when it is given.
func (o *options) serveMetrics(ctx context.Context, strategy string) error {
	o.opts.Metrics = metrics.New(strategy)
	if o.metricsAddr == "" {
		return nil
	}
	rc, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return err
	}
	maddr, scheme, err := serve.ServeMetrics(ctx, o.opts.Metrics, o.metricsAddr, o.access, rc)
	if err != nil {
		return usage.Errorf("--metrics-addr %w", err)
	}
	fmt.Fprintf(o.streams.ErrOut, "metrics at %s://%s/metrics\n", scheme, maddr)
	return nil
}

// finish ends the session once serving ended (ctx's end: a signal, or a
// client's Close): left for the next serve under --detach-on-signal, else
// torn down within timeout.
func (o *options) finish(ctx context.Context, s *session.Session, v *serve.Service, serveErr error, timeout time.Duration, targets []fleet.Target) error {
	tctx, tcancel := context.WithTimeout(context.Background(), timeout)
	defer tcancel()
	if o.detach && ctx.Err() != nil && !v.ClosedByClient() {
		if err := s.Detach(tctx); err != nil {
			return fmt.Errorf("session %s: %w", o.runID, err)
		}
		fmt.Fprintf(o.streams.ErrOut, "session %s: left as it is, for serve --session-name %s or --resume %s\n", o.runID, o.runID, o.runID)
		return serveErr
	}
	if err := v.Shutdown(tctx); err != nil {
		if te := (*fleet.TeardownError)(nil); errors.As(err, &te) {
			return fmt.Errorf("session %s: %w\n%s", o.runID, err, runid.ReapHint(o.runID, o.inputs.ConfigFile, targets))
		}
		return fmt.Errorf("session %s: %w", o.runID, err)
	}
	if serveErr != nil {
		return fmt.Errorf("session %s: serving: %w", o.runID, serveErr)
	}
	fmt.Fprintf(o.streams.ErrOut, "session %s: closed, everything of it removed\n", o.runID)
	return nil
}

// open starts the session, or resumes it (--resume; --session-name when it
// exists).
func (o *options) open(ctx context.Context, cfg config.Fleet, ts []tasks.Task, targets []fleet.Target) (*session.Session, error) {
	if o.resume != "" {
		return session.Resume(ctx, o.runID, given(cfg), targets, o.opts)
	}
	if o.session != "" {
		s, err := session.Resume(ctx, o.runID, given(cfg), targets, o.opts)
		if !errors.Is(err, session.ErrNoSession) {
			return s, err
		}
	}
	return session.Open(ctx, o.runID, cfg, ts, targets, o.opts)
}

// complete reads the configuration and tasks the flags give and settles
// the session's run id: resumed, named, given or generated.
func (o *options) complete(cmd *cobra.Command) (config.Fleet, []tasks.Task, error) {
	cfg, ts, err := o.inputs.Load(cmd.Flags(), o.streams.In)
	if err != nil {
		return cfg, nil, err
	}
	switch {
	case o.resume != "" && o.session != "":
		return cfg, nil, usage.Errorf("--resume and --session-name: give one; --session-name resumes the session when it exists")
	case o.resume != "":
		if err := o.resuming(cmd, ts); err != nil {
			return cfg, nil, err
		}
		o.runID = o.resume
	case o.session != "":
		if o.runID != "" || len(ts) > 0 {
			return cfg, nil, usage.Errorf("--session-name names the session's run id and it is given its tasks by its clients: drop --run-id and --tasks")
		}
		if o.runID, err = runid.FromFlag(o.session); err != nil {
			return cfg, nil, err
		}
	default:
		if o.runID, err = runid.FromFlag(o.runID); err != nil {
			return cfg, nil, err
		}
	}
	return cfg, ts, nil
}

// validate refuses flags that do not go together or values the session
// cannot hold.
func (o *options) validate() error {
	if len(o.accounts) > 0 && o.tokenFile != "" {
		return usage.Errorf("--allow-service-account and --token-file: callers are admitted by their ServiceAccount tokens or by serve's token, not both")
	}
	for _, a := range o.accounts {
		if err := serve.ParseAccount(a); err != nil {
			return usage.Errorf("%w", err)
		}
	}
	if (o.access.CertFile == "") != (o.access.KeyFile == "") {
		return usage.Errorf("--tls-cert-file and --tls-key-file go together")
	}
	if err := inputs.CheckPrepullHighWater(o.opts.PrepullHighWater); err != nil {
		return err
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"lease-ttl", o.opts.LeaseTTL}, {"warm-ttl", o.opts.WarmTTL}} {
		if d.v <= 0 {
			return usage.Errorf("--%s %s: must be positive", d.flag, d.v)
		}
	}
	return inputs.CheckHeartbeat(o.opts.Heartbeat)
}

// resuming checks what --resume goes with: a session's run id, tasks and
// options are its own.
func (o *options) resuming(cmd *cobra.Command, ts []tasks.Task) error {
	if o.runID != "" && o.runID != o.resume {
		return usage.Errorf("--run-id %s and --resume %s: a resumed session keeps its run id; give --resume alone", o.runID, o.resume)
	}
	if len(ts) > 0 {
		return usage.Errorf("--tasks with --resume: the session has its tasks already; add more with the client's add_tasks")
	}
	for _, name := range []string{"lease-ttl", "warm-ttl", "heartbeat"} {
		if cmd.Flags().Changed(name) {
			return usage.Errorf("--%s with --resume: a resumed session keeps the options it was served with", name)
		}
	}
	return nil
}

// given is the configuration the command line gave, or the zero value
// when it gave none: a resumed session then takes its own.
func given(cfg config.Fleet) config.Fleet {
	if reflect.DeepEqual(cfg, config.Default()) {
		return config.Fleet{}
	}
	return cfg
}
