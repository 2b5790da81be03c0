// Package fleet is the engine of a run: it sizes warm pools for a batch of
// tasks, places them over one or more clusters, warms them as the chosen
// strategy says, claims a sandbox per task, runs work in it, and tears
// everything of the run down — and nothing of any other run.
//
// A run in Go, as `kubectl sandbox-fleet run` does it (error handling
// left out):
//
//	cfg, _ := config.Load("fleet.yaml")
//	ts, _ := tasks.Load([]string{"tasks.jsonl"}, nil, tasks.Options{Rewrite: cfg.Rewrite})
//	targets, _ := fleet.Targets(cfg, genericclioptions.NewConfigFlags(true))
//	f, _ := fleet.Open(ctx, "run-1", cfg, ts, targets)
//	defer f.Close()
//	_ = f.Preflight(ctx) // nothing is created when it fails
//	stop, _ := f.StartHeartbeats(ctx, "my-driver", 0)
//	defer stop(context.WithoutCancel(ctx))
//	rep, _ := f.Run(ctx, fleet.RunOptions{Work: fleet.ExecWork([]string{"python3", "-m", "pytest", "-q"}, nil)})
//
// NewPlan says, from plain data, what such a run does; a trainer that
// owns its schedule uses package session instead of Run.
//
// Every wait is served by one shared informer per kind and cluster
// (internal/fleet/tracker); the engine never polls the API server and
// never opens a watch per object.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/claim"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/placement"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/sizing"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/teardown"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/tracing"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/warm"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/capacity"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
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
	config  config.Cluster
	spec    resources.PodSpec
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
	RunID    string
	Config   config.Fleet
	Tasks    []tasks.Task
	Plan     Plan
	Clusters []*Cluster
	// Metrics, when set, receive the run's figures as they happen.
	Metrics *metrics.Metrics

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

// Open sizes the run and starts following its objects on every target.
// Nothing is created until Run. Close releases what Open started.
func Open(ctx context.Context, runID string, cfg config.Fleet, ts []tasks.Task, targets []Target) (*Fleet, error) {
	if len(targets) == 0 {
		return nil, errors.New("a fleet needs at least one cluster")
	}
	policy, err := placement.New(cfg.Placement)
	if err != nil {
		return nil, err
	}
	// The trackers live until Close; ctx only bounds opening, so a ctx
	// that ends while Open runs stops them too.
	watchCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer context.AfterFunc(ctx, stop)()
	f := &Fleet{RunID: runID, Config: cfg, Tasks: ts, policy: policy, stop: stop,
		rec: report.New(cfg.Strategy), warm: map[string]*placed{}, originals: map[string]string{}, recycler: newRecycler(cfg)}
	start := time.Now()
	f.Plan = NewPlan(cfg, ts)
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
		f.Clusters = append(f.Clusters, &Cluster{
			Name: t.Config.Name, Clients: t.Clients, tracker: tr, config: t.Config, spec: spec,
			claimer: &claim.Claimer{Client: t.Clients.Client, Tracker: tr, Grace: graces(cfg)},
		})
	}
	if cfg.Placement == "image-affinity" && len(f.Clusters) > 1 {
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

// readNodeCaches sets what each cluster's nodes (those its node selector
// picks) lack of each image of the plan, from their NodeImageCaches, for
// image-affinity placement. A cluster whose caches cannot be read (no
// agents, no CRD, no right to list) gives no signal: it is warned about,
// and its images are placed as if no cache knew them.
func (f *Fleet) readNodeCaches(ctx context.Context) {
	indexes := make([]*nodecache.Index, len(f.Clusters))
	nodes := make([][]string, len(f.Clusters))
	for i, c := range f.Clusters {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		err := c.Clients.Client.List(ctx, list, client.MatchingLabels(c.spec.NodeSelector))
		if err == nil {
			for _, n := range list.Items {
				nodes[i] = append(nodes[i], n.Name)
			}
			indexes[i], err = informer.Snapshot(ctx, c.Clients.Client, nodes[i])
		}
		if err != nil {
			klog.Warningf("image-affinity on cluster %s: reading its nodes' image caches: %v; placing without them", c.Name, err)
			indexes[i] = nil
		}
	}
	layers := map[string][]v1alpha1.Layer{}
	var unlisted []string
	for _, p := range f.Plan.Pools {
		if _, seen := layers[p.Image]; seen {
			continue
		}
		layers[p.Image] = nil
		for _, x := range indexes {
			if x != nil && len(layers[p.Image]) == 0 {
				layers[p.Image] = x.PodLayers([]string{p.Image}, nil)
			}
		}
		if len(layers[p.Image]) == 0 {
			unlisted = append(unlisted, p.Image)
		}
	}
	maps.Copy(layers, readRegistries(ctx, unlisted))
	for _, p := range f.Plan.Pools {
		if len(layers[p.Image]) == 0 {
			continue
		}
		for i, c := range f.Clusters {
			if indexes[i] == nil || len(nodes[i]) == 0 {
				continue
			}
			if c.lacking == nil {
				c.lacking = map[string]int64{}
			}
			c.lacking[p.Image] = slices.Min(indexes[i].MissingOn(layers[p.Image], nodes[i]))
		}
	}
}

// readRegistries reads the layers of images no node lists from their
// registries (with the docker config's credentials), so that a new image
// is placed where its base already is. Start-up waits for this at most a
// minute, each image 30 s; an image not read then is placed without its
// layers, and the failures and skips are warned about at once.
func readRegistries(ctx context.Context, images []string) map[string][]v1alpha1.Layer {
	ctx, cancel := context.WithTimeout(ctx, registryBudget)
	defer cancel()
	r := (&registry.Layers{}).GetAll(ctx, images, 30*time.Second)
	if len(r.Failed) > 0 {
		klog.Warningf("image-affinity: %d of %d images no node holds could not be read from their registries, and are placed without their layers; the first: %v",
			len(r.Failed), len(images), r.Failed[0])
	}
	if len(r.Skipped) > 0 {
		klog.Warningf("image-affinity: %d of %d images no node holds were not read (their registry did not answer, or start-up's %s for reading ran out), and are placed without their layers; the first: %s",
			len(r.Skipped), len(images), registryBudget, r.Skipped[0])
	}
	return r.Found
}

// registryBudget bounds how long start-up reads registries for placement.
const registryBudget = time.Minute

// Preflight checks every cluster, concurrently, before anything is
// created: the Agent Sandbox API, the namespace, permissions, runtime class
// and pull secret. It returns the failures, each with what to do.
func (f *Fleet) Preflight(ctx context.Context) error {
	start := time.Now()
	defer func() { f.phase("preflight", "", time.Since(start)) }()
	errs := make([]error, len(f.Clusters))
	var wg sync.WaitGroup
	for i, c := range f.Clusters {
		wg.Go(func() {
			rep := preflight.Run(ctx, c.Clients.Kube, c.Clients.Config.Host, preflight.Options{
				Namespace: c.Namespace(), RuntimeClass: c.spec.RuntimeClassName, ImagePullSecret: c.spec.ImagePullSecret,
			})
			for _, w := range rep.Warnings() {
				klog.Warningf("preflight on cluster %s: %s: %s", c.Name, w.Name, w.Detail)
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
		ObjectLabels: cfg.Labels, Extra: t.ExtraPodSpec,
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

// place chooses a cluster for image's pool of replicas and counts them
// there. Callers hold f.mu.
func (f *Fleet) place(image string, replicas int) (*Cluster, error) {
	targets := make([]placement.Target, len(f.Clusters))
	for i, c := range f.Clusters {
		targets[i] = placement.Target{Name: c.Name, Weight: c.config.Weight, MaxReplicas: c.config.MaxReplicas,
			Replicas: c.replicas, Claims: c.claims, Lacking: c.lacking}
	}
	i, err := f.policy.Choose(image, replicas, targets)
	if err != nil {
		return nil, fmt.Errorf("placing the pool of %s: %w", image, err)
	}
	return f.Clusters[i], nil
}

// Warm makes the pools of images warm with replicas(image) sandboxes each,
// filling each cluster's share in waves of the create budget, and returns
// once all are Ready. Images already warm are grown if asked for more,
// never shrunk. Pools that cannot become Ready are returned, from every
// cluster, as one WarmError.
func (f *Fleet) Warm(ctx context.Context, images []string, replicas func(image string) int) error {
	byCluster := map[*Cluster][]warm.Pool{}
	f.mu.Lock()
	for _, img := range images {
		want := replicas(img)
		p, ok := f.warm[img]
		if ok && p.replicas >= want {
			byCluster[p.cluster] = append(byCluster[p.cluster], warm.Pool{Template: p.template, Pool: p.pool})
			continue
		}
		if !ok {
			c, err := f.place(img, want)
			if err != nil {
				f.mu.Unlock()
				return err
			}
			spec := c.spec
			spec.OriginalImage = f.originals[img]
			tmpl, err := resources.Template(c.Namespace(), f.RunID, img, spec)
			if err != nil {
				f.mu.Unlock()
				return err
			}
			p = &placed{cluster: c, template: tmpl}
			if f.paced() {
				p.held, p.gate = map[string]bool{}, make(chan struct{}, 1)
			}
			f.warm[img] = p
		}
		p.pool = resources.WarmPool(p.template, int32(want))
		p.cluster.replicas += want - p.replicas
		f.warmed(p.cluster.Name, want-p.replicas)
		p.replicas = want
		byCluster[p.cluster] = append(byCluster[p.cluster], warm.Pool{Template: p.template, Pool: p.pool})
	}
	f.mu.Unlock()

	f.stats.warming.Add(int64(len(images)))
	defer f.stats.warming.Add(-int64(len(images)))
	type filled struct {
		cluster *Cluster
		err     error
	}
	done := make(chan filled, len(byCluster))
	for c, pools := range byCluster {
		go func() {
			filler := &warm.Filler{Client: c.Clients.Client, Tracker: c.tracker, Budget: *f.Config.WarmCreateBudget,
				Observe: func(phase string, d time.Duration) { f.phase(phase, c.Name, d) },
				Check:   f.poolCheck(ctx, c),
				Settled: func(pool, why string) {
					klog.Warningf("pool %s serves with fewer sandboxes than planned: %s", pool, why)
				}}
			done <- filled{c, filler.Fill(ctx, pools)}
		}()
	}
	// Pool names are unique over the clusters, so their failures merge.
	failed := WarmError{}
	var hard []error
	for range byCluster {
		r := <-done
		var some WarmError
		switch {
		case errors.As(r.err, &some):
			maps.Copy(failed, some)
		case r.err != nil:
			hard = append(hard, fmt.Errorf("cluster %s: %w", r.cluster.Name, r.err))
		}
	}
	if len(hard) > 0 {
		return errors.Join(hard...)
	}
	if len(failed) > 0 {
		return failed
	}
	return nil
}

// graces is how long sandboxes may be in trouble that can clear up before
// they are given up: for as long as readyTimeout allows when fail-fast is
// off.
func graces(cfg config.Fleet) claim.Grace {
	if cfg.FailFast != nil && !*cfg.FailFast {
		return claim.Grace{}
	}
	return claim.Grace{Backoff: cfg.ClaimGrace.Duration, Unschedulable: cfg.UnschedulableGrace.Duration}
}

// poolCheck judges a pool that is not Ready replica by replica (see
// claim.PoolPatience): it is given up only when none of it can serve.
func (f *Fleet) poolCheck(ctx context.Context, c *Cluster) warm.Check {
	var mu sync.Mutex
	patience := map[string]*claim.PoolPatience{}
	return func(pool string, want int32) (claim.PoolJudgement, error) {
		pods, err := c.tracker.PoolPods(ctx, pool)
		if err != nil {
			return claim.PoolJudgement{}, err
		}
		mu.Lock()
		defer mu.Unlock()
		p := patience[pool]
		if p == nil {
			p = &claim.PoolPatience{Grace: graces(f.Config)}
			patience[pool] = p
		}
		return p.Judge(pods, int(want), time.Now()), nil
	}
}

// Unwarm deletes the pools and templates of images, and releases the
// clean sandboxes kept for them. It does not wait for their sandboxes to
// go; teardown does.
func (f *Fleet) Unwarm(ctx context.Context, images []string) error {
	errs := []error{f.releaseClean(ctx, images)}
	for _, img := range images {
		f.mu.Lock()
		p, ok := f.warm[img]
		delete(f.warm, img)
		var objs []client.Object
		if ok {
			p.cluster.replicas -= p.replicas
			f.warmed(p.cluster.Name, -p.replicas)
			objs = []client.Object{p.pool.DeepCopy(), p.template.DeepCopy()}
		}
		f.mu.Unlock()
		if !ok {
			continue
		}
		c := p.cluster.Clients.Client
		background := client.PropagationPolicy(metav1.DeletePropagationBackground)
		for _, obj := range objs {
			if err := client.IgnoreNotFound(c.Delete(ctx, obj, background)); err != nil {
				errs = append(errs, fmt.Errorf("cluster %s: deleting %s: %w", p.cluster.Name, obj.GetName(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// Acquire claims a sandbox of t's image from its warm pool and waits until
// it is Ready, for readyTimeout at most. The pool must be warm.
func (f *Fleet) Acquire(ctx context.Context, t tasks.Task) (*Sandbox, error) {
	f.mu.Lock()
	p, ok := f.warm[t.Image]
	var pool *extensionsv1beta1.SandboxWarmPool
	if ok {
		p.cluster.claims++
		// Warm replaces p.pool when it grows the pool; take this one.
		pool = p.pool
	}
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("task %s: no warm pool for %s", t.ID, t.Image)
	}
	// A claim the controller never makes Ready (it is down, or the claim
	// is stuck) must not hold its task for ever: readyTimeout bounds it.
	ctx, cancel := context.WithTimeout(ctx, f.Config.ReadyTimeout.Duration)
	defer cancel()
	start := time.Now()
	settled := f.pace(ctx, p, pool.Name)
	h, err := p.cluster.claimer.Acquire(ctx, pool, t.ID)
	settled()
	f.claimed(p.cluster.Name, err == nil, err == nil && h.Warm, time.Since(start))
	if err != nil {
		f.mu.Lock()
		p.cluster.claims--
		f.mu.Unlock()
		return nil, err
	}
	h.Cluster = p.cluster.Name
	if f.paced() {
		f.mu.Lock()
		p.held[h.Pod] = true
		f.mu.Unlock()
	}
	return &Sandbox{Handle: h, cluster: p.cluster, image: t.Image, session: f.Config.Session}, nil
}

// paced reports whether claims wait for a warm sandbox. Under the none
// strategy pools hold one sandbox and claims are meant to start cold.
func (f *Fleet) paced() bool {
	return f.Config.ClaimPacing == "warm" && f.Config.Strategy != "none"
}

// paceLimit bounds the wait for a warm sandbox: a pool that cannot refill
// (its Pods failing, the cluster full) must not stall its tasks for ever;
// after it they claim at once and may start cold.
const paceLimit = time.Minute

// pace holds a claim back, under warm claim pacing, until p's pool has a
// Ready sandbox that no other claim of the run holds or is about to take:
// a claim made on an exhausted pool makes the controller cold-start a
// sandbox while the pool also refills, which doubles the work of a control
// plane already behind. Free sandboxes are counted from the pool's Pods in
// the tracker's cache rather than from the pool's status, which lags
// adoptions. The returned func settles the claim once it has been made.
func (f *Fleet) pace(ctx context.Context, p *placed, pool string) (settled func()) {
	if !f.paced() {
		return func() {}
	}
	wait := true
	limit := time.After(paceLimit)
	select {
	case p.gate <- struct{}{}:
		defer func() { <-p.gate }()
	case <-limit:
		wait = false
	case <-ctx.Done():
		wait = false
	}
	for {
		changed := p.cluster.tracker.PoolChanged(pool)
		free := 1 // unknown: hold nothing back
		if wait {
			if pods, err := p.cluster.tracker.PoolPods(ctx, pool); err == nil {
				free = f.freeSandboxes(p, pods)
			}
		}
		f.mu.Lock()
		if free > 0 {
			p.pending++
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				p.pending--
				f.mu.Unlock()
			}
		}
		f.mu.Unlock()
		select {
		case <-changed:
		case <-limit:
			wait = false
		case <-ctx.Done():
			wait = false
		}
	}
}

// freeSandboxes counts the pool's Ready Pods that no claim of the run holds
// or is about to take, and forgets held Pods that are gone or going.
func (f *Fleet) freeSandboxes(p *placed, pods []corev1.Pod) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	live := make(map[string]bool, len(pods))
	free := 0
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		live[pod.Name] = true
		if !p.held[pod.Name] && tracker.PodReady(pod) {
			free++
		}
	}
	for name := range p.held {
		if !live[name] {
			delete(p.held, name)
		}
	}
	return free - p.pending
}

// Release gives a sandbox back: its claim, and with it the sandbox, is
// deleted.
func (f *Fleet) Release(ctx context.Context, s *Sandbox) error {
	s.closeShell()
	start := time.Now()
	err := s.cluster.claimer.Release(ctx, s.Handle)
	f.phase("release", s.cluster.Name, time.Since(start))
	f.mu.Lock()
	s.cluster.claims--
	if err == nil && s.Handle.Pod != "" {
		if s.cluster.released == nil {
			s.cluster.released = map[string]bool{}
		}
		s.cluster.released[s.Handle.Pod] = true
	}
	f.mu.Unlock()
	return err
}

// Teardown deletes everything of the run on every cluster, in parallel
// (teardown.Run), and waits until the API servers show none of it left.
func (f *Fleet) Teardown(ctx context.Context) (err error) {
	ctx, span := tracing.Tracer().Start(ctx, "teardown")
	defer func() { tracing.End(span, err) }()
	start := time.Now()
	errs := make([]error, len(f.Clusters))
	var wg sync.WaitGroup
	for i, c := range f.Clusters {
		wg.Go(func() {
			if err := teardown.Run(ctx, c.Clients.Client, c.tracker, c.Namespace(), f.RunID); err != nil {
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
	for _, c := range f.Clusters {
		left, err := teardown.Leftovers(ctx, c.Clients.Client, c.Namespace(), f.RunID)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		if len(left) > 0 {
			out[c.Name] = left
		}
	}
	return out, nil
}

// Environment describes every cluster for the run report. It never fails:
// what cannot be read is left out.
func (f *Fleet) Environment(ctx context.Context) map[string]report.Environment {
	env := map[string]report.Environment{}
	for _, c := range f.Clusters {
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
