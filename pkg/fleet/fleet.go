package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/go-logr/logr"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/capacity"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/controllerwatch"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/placement"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/sizing"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/teardown"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracing"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// Target is one cluster of the fleet: its configuration and its clients.
type Target struct {
	Config  config.Cluster
	Clients *kube.Clients
}

// Cluster is a cluster of a running fleet.
type Cluster struct {
	Name    string
	Clients *kube.Clients
	// tracker follows the run's objects here; claimer claims its
	// sandboxes.
	tracker *tracker.Tracker
	claimer *claim.Claimer
	// controller follows the cluster's Agent Sandbox controller, so that
	// waits for sandboxes end when it is down for good.
	controller *controllerwatch.Watch
	config     config.Cluster
	spec       resources.PodSpec
	// replicas and claims are the run's load here, for placement.
	replicas, claims int
	// released are the Pods of the sandboxes the run gave back that the
	// breaker last saw live (guarded by the Fleet's mu).
	released map[string]bool
	// lacking is, for the run's images, the fewest bytes of each one of
	// the cluster's nodes lacks (image-affinity placement).
	lacking map[string]int64
}

// Namespace is where the run's objects live on this cluster.
func (c *Cluster) Namespace() string { return c.Clients.Namespace }

// Fleet is one run over one or more clusters.
type Fleet struct {
	runID    string
	cfg      config.Fleet
	clusters []*Cluster

	// tasks and plan grow as a session adds tasks, under mu.
	tasks []tasks.Task
	plan  Plan

	// driving is what Open's options said; its metrics, when set, receive
	// the run's figures as they happen.
	driving driving
	// log is the logger of the context Open was given.
	log    logr.Logger
	policy placement.Policy
	// recycler keeps clean sandboxes for reuse; nil when the run does not
	// recycle.
	recycler *recycler
	stop     context.CancelFunc
	rec      *report.Recorder
	stats    stats

	// originals maps a rewritten image to the image its tasks named.
	originals map[string]string

	mu sync.Mutex
	// warm is the placed pool of each image that is warm now.
	warm map[string]*placed
	// pulls is the run's pull plan, once made; nil without one.
	pulls *plannedPulls
	// warmAheadWaits holds each window's warm-ahead back until the window
	// it runs beside has claimed all it will (see crowded); set before the
	// run's first pass.
	warmAheadWaits bool
}

// placed is an image's pool on the cluster placement chose for it.
type placed struct {
	cluster  *Cluster
	pool     *extensionsv1beta1.SandboxWarmPool
	template *extensionsv1beta1.SandboxTemplate
	replicas int
	// Under warm claim pacing, pending counts claims made on the pool and
	// not yet settled, and held names the Pods of its sandboxes claimed by
	// the run, until they go.
	pending int
	held    map[string]bool
	// gate lets one paced claim at a time watch the pool for a free
	// sandbox, so that an event wakes one waiter, not all of them.
	gate chan struct{}
}

// paced reports whether claims on the pool wait for a warm sandbox (see
// Fleet.pace): under warm claim pacing, for pools that keep some.
func (p *placed) paced() bool { return p.gate != nil }

// Open sizes the run and starts following its objects on every target,
// driven as opts say. Nothing is created until Run (or Start). Close
// releases what Open started.
func Open(ctx context.Context, runID string, cfg config.Fleet, ts []tasks.Task, targets []Target, opts ...Option) (*Fleet, error) {
	if len(targets) == 0 {
		return nil, errors.New("a fleet needs at least one cluster")
	}
	driving, err := drivingOf(opts)
	if err != nil {
		return nil, err
	}
	policy, err := placement.New(cfg.Placement)
	if err != nil {
		return nil, err
	}
	// The trackers live until Close; ctx only bounds opening, so a ctx
	// that ends while Open runs stops them too.
	watchCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer context.AfterFunc(ctx, stop)()
	f := &Fleet{runID: runID, cfg: cfg, tasks: ts, driving: driving, policy: policy, stop: stop, log: klog.FromContext(ctx),
		rec: report.New(cfg.Strategy), warm: map[string]*placed{}, originals: map[string]string{}, recycler: newRecycler(cfg)}
	start := time.Now()
	f.plan = NewPlan(cfg, ts)
	f.phase("plan", "", time.Since(start))
	f.stats.total.Store(int64(len(ts) * cfg.Epochs))
	for _, t := range ts {
		if t.OriginalImage != "" {
			f.originals[t.Image] = t.OriginalImage
		}
	}

	for _, t := range targets {
		tr, err := tracker.Start(watchCtx, t.Clients.Config, t.Clients.Namespace, runID)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("cluster %s: %w", t.Config.Name, err)
		}
		spec := podSpec(cfg, t.Config)
		f.clusters = append(f.clusters, &Cluster{
			Name: t.Config.Name, Clients: t.Clients, tracker: tr, config: t.Config, spec: spec,
			claimer:    &claim.Claimer{Client: t.Clients.Client, Tracker: tr, Grace: graces(cfg)},
			controller: controllerwatch.Start(watchCtx, t.Clients.Kube, func(s controllerwatch.State) { f.reportController(t.Config.Name, s) }),
		})
	}
	if cfg.Placement == "image-affinity" && len(f.clusters) > 1 {
		f.readNodeCaches(ctx)
	}
	// A ctx that ended meanwhile stopped the trackers: a fleet without
	// them would wait for nothing.
	if err := context.Cause(ctx); err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the fleet: %w", err)
	}
	return f, nil
}

// preflight checks every cluster, concurrently, before anything is
// created, and returns the failures, each with what to do.
func (f *Fleet) preflight(ctx context.Context) error {
	start := time.Now()
	defer func() { f.phase("preflight", "", time.Since(start)) }()
	errs := make([]error, len(f.clusters))
	var wg sync.WaitGroup
	for i, c := range f.clusters {
		wg.Go(func() {
			rep := preflight.Run(ctx, c.Clients.Kube, c.Clients.Config.Host, preflight.Options{
				Namespace: c.Namespace(), RuntimeClass: c.spec.RuntimeClassName, ImagePullSecret: c.spec.ImagePullSecret,
				Session: f.driving.session,
			})
			for _, w := range rep.Warnings() {
				f.log.Info("Preflight warns", "cluster", c.Name, "check", w.Name, "detail", w.Detail)
			}
			var failed []error
			for _, fail := range rep.Failures() {
				failed = append(failed, fmt.Errorf("preflight on cluster %s: %s: %s; to fix: %s", c.Name, fail.Name, fail.Detail, fail.Fix))
			}
			errs[i] = errors.Join(failed...)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RunID is the id that labels everything of the run.
func (f *Fleet) RunID() string { return f.runID }

// Config is the run's configuration, as Open was given it.
func (f *Fleet) Config() config.Fleet { return f.cfg }

// Plan is what the run does; a session's grows as it adds tasks.
func (f *Fleet) Plan() Plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plan
}

// Clusters are the clusters the run is spread over, in the order of
// Open's targets.
func (f *Fleet) Clusters() []*Cluster { return slices.Clip(f.clusters) }

// Close stops following the run's objects. It deletes nothing.
func (f *Fleet) Close() { f.stop() }

// imagesOf lists the distinct images of ts with their task counts, in the
// order they first appear.
func imagesOf(ts []tasks.Task) []sizing.Image {
	var out []sizing.Image
	at := map[string]int{}
	for _, t := range ts {
		i, ok := at[t.Image]
		if !ok {
			i = len(out)
			at[t.Image] = i
			out = append(out, sizing.Image{Name: t.Image})
		}
		out[i].Tasks++
	}
	return out
}

// podSpec is the sandbox Pod of cfg on cluster c, whose node selector,
// runtime class and pull secret override the template's.
func podSpec(cfg config.Fleet, c config.Cluster) resources.PodSpec {
	t := cfg.Template
	spec := resources.PodSpec{
		Command: t.Command, Resources: t.Resources, RuntimeClassName: t.RuntimeClassName,
		NodeSelector: t.NodeSelector, ImagePullSecret: t.ImagePullSecret, ImagePullPolicy: t.ImagePullPolicy,
		Tolerations: t.Tolerations, Colocate: t.Colocate, PodLabels: t.Labels, PodAnnotations: t.Annotations,
		ObjectLabels: cfg.Labels, Extra: t.ExtraPodSpec, ExtraTemplate: t.ExtraTemplateSpec, AgentServer: t.AgentServer,
	}
	if len(c.NodeSelector) > 0 {
		spec.NodeSelector = c.NodeSelector
	}
	if c.RuntimeClassName != "" {
		spec.RuntimeClassName = c.RuntimeClassName
	}
	if c.ImagePullSecret != "" {
		spec.ImagePullSecret = c.ImagePullSecret
	}
	return spec
}

// Teardown deletes everything of the run on every cluster, in parallel
// (teardown.Run), and waits until the API servers show none of it left.
func (f *Fleet) Teardown(ctx context.Context) (err error) {
	ctx, span := tracing.Tracer().Start(ctx, "teardown")
	defer func() { tracing.End(span, err) }()
	start := time.Now()
	errs := make([]error, len(f.clusters))
	var wg sync.WaitGroup
	for i, c := range f.clusters {
		wg.Go(func() {
			if err := teardown.Run(ctx, c.Clients.Client, c.tracker, c.Namespace(), f.runID); err != nil {
				errs[i] = fmt.Errorf("cluster %s: %w", c.Name, err)
			}
		})
	}
	wg.Wait()
	f.forgetClean()
	f.mu.Lock()
	for img, p := range f.warm {
		p.cluster.replicas -= p.replicas
		f.warmed(p.cluster.Name, -p.replicas)
		delete(f.warm, img)
	}
	f.mu.Unlock()
	f.phase("teardown", "", time.Since(start))
	return errors.Join(errs...)
}

// Leftovers lists, per cluster, what of the run is still there, read from
// the API servers.
func (f *Fleet) Leftovers(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	for _, c := range f.clusters {
		left, err := teardown.Leftovers(ctx, c.Clients.Client, c.Namespace(), f.runID)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		if len(left) > 0 {
			out[c.Name] = left
		}
	}
	return out, nil
}

// environment describes every cluster for the run report. It never fails:
// what cannot be read is left out.
func (f *Fleet) environment(ctx context.Context) map[string]report.Environment {
	env := map[string]report.Environment{}
	for _, c := range f.clusters {
		e := report.Environment{Server: c.Clients.Config.Host, Namespace: c.Namespace(), Context: c.config.Context}
		if v, err := c.Clients.Kube.Discovery().ServerVersion(); err == nil {
			e.KubernetesVersion = v.GitVersion
		}
		if nodes, err := c.Clients.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err == nil {
			e.Nodes = len(nodes.Items)
			e.NodePools = labelValues(nodes.Items, capacity.PoolLabels...)
			e.InstanceTypes = labelValues(nodes.Items, corev1.LabelInstanceTypeStable)
			e.Regions = labelValues(nodes.Items, corev1.LabelTopologyRegion)
		}
		env[c.Name] = e
	}
	return env
}

// labelValues is the sorted set of values nodes have for any of keys.
func labelValues(nodes []corev1.Node, keys ...string) []string {
	var out []string
	for _, n := range nodes {
		for _, k := range keys {
			if v := n.Labels[k]; v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// reportController logs that cluster's Agent Sandbox controller went down
// or came back: a session has no progress line.
func (f *Fleet) reportController(cluster string, s controllerwatch.State) {
	if !s.Down {
		f.log.Info("The Agent Sandbox controller is back", "cluster", cluster)
		return
	}
	f.log.Info("The Agent Sandbox controller is down: its leader Lease ran out unrenewed; waits for sandboxes end the grace after that unless it comes back",
		"cluster", cluster, "lease", klog.KRef(preflight.ControllerNamespace, preflight.ControllerLease), "since", s.Since.UTC().Format(time.RFC3339),
		"grace", f.cfg.ControllerGrace.Duration)
}
