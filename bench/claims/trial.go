package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracing"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// trialResult is what a trial process reports to its parent.
type trialResult struct {
	// TimeToSandbox is each task's wait for a Ready sandbox, in seconds.
	TimeToSandbox []float64 `json:"timeToSandbox"`
	// First and Last bound the claims: the first claim asked for, the last
	// sandbox Ready.
	First, Last time.Time
	Sandboxes   []string
	// Requests counts the API requests the client made, watches excepted;
	// RequestsByKind the same by verb and resource (kindOf).
	Requests       int64
	RequestsByKind map[string]int64 `json:"requestsByKind"`
	// ProcessStart is when the trial process started; LastTaskEnd when its
	// last task was done with its sandbox; TornDown when nothing of the
	// trial was left in its namespace, as the API server said.
	ProcessStart, LastTaskEnd, TornDown time.Time
}

// processStart is when this process started, near enough: package
// variables are set before main runs.
var processStart = time.Now()

// measurement is one trial's figures.
type measurement struct {
	P50, P99     float64
	ClaimsPerSec float64
	// StartToFirstClaim runs from process start to the first claim asked
	// for; TeardownSeconds from the last task's end to nothing left;
	// ProcessWallSeconds is the whole process, as its parent saw it.
	StartToFirstClaim, TeardownSeconds, ProcessWallSeconds float64
	WarmShare                                              float64
	RequestsPerTask                                        float64
	ServerClaimRequestsPerTask                             float64
	// RequestsByKind is the trial's requests by kindOf, per task.
	RequestsByKind     map[string]float64 `json:",omitempty"`
	CPUSeconds, RSSMiB float64
	WallSeconds        float64
}

func (r trialResult) measure(sc scenario) measurement {
	sorted := slices.Clone(r.TimeToSandbox)
	slices.Sort(sorted)
	wall := r.Last.Sub(r.First).Seconds()
	return measurement{
		P50: stats.Percentile(sorted, 0.50), P99: stats.Percentile(sorted, 0.99),
		ClaimsPerSec:      float64(len(sorted)) / wall,
		RequestsPerTask:   float64(r.Requests) / float64(sc.Tasks),
		RequestsByKind:    perTask(r.RequestsByKind, sc.Tasks),
		WallSeconds:       wall,
		StartToFirstClaim: r.First.Sub(r.ProcessStart).Seconds(),
		TeardownSeconds:   r.TornDown.Sub(r.LastTaskEnd).Seconds(),
	}
}

// batch is the scenario's tasks: an equal share of tasks per image.
func batch(sc scenario) []tasks.Task {
	var ts []tasks.Task
	for i := range sc.Tasks {
		img := i % sc.Images
		ts = append(ts, tasks.Task{ID: fmt.Sprintf("t%d", i), Image: fmt.Sprintf("bench.example/img-%d:v1", img)})
	}
	return ts
}

// counting counts the requests sent through it, watches excepted, in
// all and by kindOf.
type counting struct {
	next http.RoundTripper
	n    *atomic.Int64
	mu   *sync.Mutex
	kind map[string]int64
}

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Get("watch") != "true" {
		c.n.Add(1)
		c.mu.Lock()
		c.kind[kindOf(r.Method, r.URL.Path)]++
		c.mu.Unlock()
	}
	return c.next.RoundTrip(r)
}

// kindOf names what a request of method on path asks of the API server:
// the verb and the resource (with its subresource), as "DELETE pods" or
// "PATCH sandboxwarmpools/status"; a path outside /api and /apis, as it is.
func kindOf(method, path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		rest = seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		rest = seg[3:]
	default:
		return method + " " + path
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return method + " " + path
	}
	kind := rest[0]
	if len(rest) >= 3 {
		kind += "/" + rest[2]
	}
	return method + " " + kind
}

// perTask divides counts by tasks.
func perTask(counts map[string]int64, tasks int) map[string]float64 {
	out := make(map[string]float64, len(counts))
	for k, n := range counts {
		out[k] = float64(n) / float64(tasks)
	}
	return out
}

func runTrial(client, kubeconfig, namespace string, sc scenario) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	var requests atomic.Int64
	var kindsMu sync.Mutex
	kinds := map[string]int64{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return counting{next: rt, n: &requests, mu: &kindsMu, kind: kinds}
	})
	clients, err := kube.ForConfig(cfg, namespace)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var res trialResult
	switch client {
	case "bare":
		res, err = bare(ctx, clients, sc)
	case "engine", "engine-paced":
		res, err = engine(ctx, clients, sc, client == "engine-paced")
	case "engine-traced":
		var stopTracing func(context.Context) error
		if stopTracing, err = tracing.Start(ctx, "bench"); err != nil {
			return err
		}
		res, err = engine(ctx, clients, sc, false)
		err = errors.Join(err, stopTracing(ctx))
	default:
		err = fmt.Errorf("unknown client %q", client)
	}
	if err != nil {
		return err
	}
	res.Requests = requests.Load()
	kindsMu.Lock()
	res.RequestsByKind = maps.Clone(kinds)
	kindsMu.Unlock()
	res.ProcessStart = processStart
	if res.TornDown, err = goneAt(ctx, clients, res.TornDown); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// engine runs the batch through the fleet engine with no work.
func engine(ctx context.Context, clients *kube.Clients, sc scenario, paced bool) (trialResult, error) {
	cfg := config.Default()
	cfg.Strategy = "naive"
	cfg.MaxConcurrent = sc.Concurrency
	cfg.MaxWarmPoolSize = max(8, sc.Replica)
	cfg.ReadyTimeout.Duration = 10 * time.Minute
	if paced {
		cfg.ClaimPacing = "warm"
	}
	targets := []fleet.Target{{Config: config.Cluster{Name: "bench", Weight: 1}, Clients: clients}}
	f, err := fleet.Open(ctx, "bench", cfg, batch(sc), targets)
	if err != nil {
		return trialResult{}, err
	}
	defer f.Close()
	var res trialResult
	var mu sync.Mutex
	_, err = f.Run(ctx, fleet.RunOptions{Work: fleet.NoWork, OnResult: func(r fleet.Result) {
		mu.Lock()
		defer mu.Unlock()
		if r.Error != "" {
			err = fmt.Errorf("task %s: %s", r.ID, r.Error)
			return
		}
		claim := r.Phases["claim"]
		res.add(r.Started, r.Started.Add(time.Duration(claim*float64(time.Second))), r.Sandbox)
		res.LastTaskEnd = time.Now()
	}})
	res.TornDown = time.Now()
	return res, err
}

// goneAt returns when nothing of the trial is left in its namespace —
// claims, pools, templates, Sandboxes, Pods — as the API server says:
// claimed, the time the client says its teardown ended, if nothing is
// left then; else the time the last of it was seen gone.
func goneAt(ctx context.Context, clients *kube.Clients, claimed time.Time) (time.Time, error) {
	for first := true; ; first = false {
		left := 0
		for _, list := range []client.ObjectList{&extensionsv1beta1.SandboxClaimList{}, &extensionsv1beta1.SandboxWarmPoolList{},
			&extensionsv1beta1.SandboxTemplateList{}, &sandboxv1beta1.SandboxList{}, &corev1.PodList{}} {
			if err := clients.Client.List(ctx, list, client.InNamespace(clients.Namespace)); err != nil {
				return time.Time{}, err
			}
			left += apimeta.LenList(list)
		}
		switch {
		case left == 0 && first:
			return claimed, nil
		case left == 0:
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *trialResult) add(asked, ready time.Time, sandbox string) {
	r.TimeToSandbox = append(r.TimeToSandbox, ready.Sub(asked).Seconds())
	if r.First.IsZero() || asked.Before(r.First) {
		r.First = asked
	}
	if ready.After(r.Last) {
		r.Last = ready
	}
	r.Sandboxes = append(r.Sandboxes, sandbox)
}

// bare is the least a competent engineer would write for the batch: one
// informer per kind for the run's objects, no deep copies, and a waiter
// woken only by events of its own object. It makes the same pools, then
// per task creates a claim, waits for it to be Ready and deletes it; at
// the end it deletes its pools and templates and waits, as a careful
// script would, until its Pods are gone.
func bare(ctx context.Context, clients *kube.Clients, sc scenario) (trialResult, error) {
	ns := clients.Namespace
	c, err := cache.New(clients.Config, cache.Options{
		Scheme:                       kube.Scheme,
		DefaultNamespaces:            map[string]cache.Config{ns: {}},
		DefaultLabelSelector:         labels.RunSelector(bareRun),
		DefaultUnsafeDisableDeepCopy: new(true),
	})
	if err != nil {
		return trialResult{}, err
	}
	w := waiters{byKey: map[string]chan struct{}{}}
	wake := func(obj any) {
		if o, ok := obj.(client.Object); ok {
			w.wake(o.GetName())
		} else if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			w.wake(d.Key[strings.LastIndexByte(d.Key, '/')+1:])
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{AddFunc: wake, UpdateFunc: func(_, obj any) { wake(obj) }, DeleteFunc: wake}
	for _, obj := range []client.Object{&extensionsv1beta1.SandboxClaim{}, &extensionsv1beta1.SandboxWarmPool{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return trialResult{}, err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return trialResult{}, err
		}
	}
	// Pod events wake the one waiter for the run's Pods to be gone.
	podInf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return trialResult{}, err
	}
	podsChanged := func(any) { w.wake(podsKey) }
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: podsChanged}); err != nil {
		return trialResult{}, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return trialResult{}, fmt.Errorf("cache sync: %w", ctx.Err())
	}
	waitFor := func(key string, done func() (bool, error)) error {
		for {
			ch := w.on(key)
			if ok, err := done(); err != nil || ok {
				return err
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	get := func(obj client.Object) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return err == nil, client.IgnoreNotFound(err)
	}

	pools := map[string]*extensionsv1beta1.SandboxWarmPool{}
	for _, t := range batch(sc) {
		if pools[t.Image] != nil {
			continue
		}
		tmpl, err := resources.Template(ns, bareRun, t.Image, resources.PodSpec{})
		if err != nil {
			return trialResult{}, err
		}
		pool := resources.WarmPool(tmpl, int32(sc.Replica))
		for _, obj := range []client.Object{tmpl, pool} {
			if err := clients.Client.Create(ctx, obj); err != nil {
				return trialResult{}, err
			}
		}
		pools[t.Image] = pool
	}
	for _, p := range pools {
		got := &extensionsv1beta1.SandboxWarmPool{}
		got.Name, got.Namespace = p.Name, p.Namespace
		if err := waitFor(p.Name, func() (bool, error) {
			found, err := get(got)
			return found && got.Status.ReadyReplicas >= int32(sc.Replica), err
		}); err != nil {
			return trialResult{}, err
		}
	}

	var res trialResult
	var resMu sync.Mutex
	claimCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	one := func(t tasks.Task) error {
		asked := time.Now()
		claim := resources.Claim(pools[t.Image], t.ID, nil)
		if err := clients.Client.Create(claimCtx, claim); err != nil {
			return err
		}
		got := &extensionsv1beta1.SandboxClaim{}
		got.Name, got.Namespace = claim.Name, claim.Namespace
		if err := waitFor(claim.Name, func() (bool, error) {
			found, err := get(got)
			return found && apimeta.IsStatusConditionTrue(got.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady)), err
		}); err != nil {
			return err
		}
		ready := time.Now()
		sandbox := got.Status.SandboxStatus.Name
		if err := clients.Client.Delete(claimCtx, claim); err != nil {
			return err
		}
		resMu.Lock()
		res.add(asked, ready, sandbox)
		res.LastTaskEnd = time.Now()
		resMu.Unlock()
		return nil
	}
	queue := make(chan tasks.Task)
	var wg sync.WaitGroup
	for range sc.Concurrency {
		wg.Go(func() {
			for t := range queue {
				if err := one(t); err != nil {
					stop(err)
				}
			}
		})
	}
	for _, t := range batch(sc) {
		select {
		case queue <- t:
		case <-claimCtx.Done():
		}
	}
	close(queue)
	wg.Wait()
	if err := context.Cause(claimCtx); err != nil {
		return trialResult{}, err
	}
	for _, obj := range []client.Object{&extensionsv1beta1.SandboxWarmPool{}, &extensionsv1beta1.SandboxTemplate{}} {
		if err := clients.Client.DeleteAllOf(ctx, obj, client.InNamespace(ns), client.MatchingLabels(labels.ForRun(bareRun))); err != nil {
			return trialResult{}, err
		}
	}
	err = waitFor(podsKey, func() (bool, error) {
		pods := &corev1.PodList{}
		err := c.List(ctx, pods, client.InNamespace(ns))
		return len(pods.Items) == 0, err
	})
	res.TornDown = time.Now()
	return res, err
}

// bareRun is the bare client's run id, on its objects as the engine's are.
const bareRun = "bare"

// podsKey is the waiter key of the bare client's teardown.
const podsKey = "\x00pods"

// waiters are channels by object name, each closed by the next event of
// its object.
type waiters struct {
	mu    sync.Mutex
	byKey map[string]chan struct{}
}

// on returns the channel the next event about key closes.
func (w *waiters) on(key string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.byKey[key]
	if !ok {
		ch = make(chan struct{})
		w.byKey[key] = ch
	}
	return ch
}

func (w *waiters) wake(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.byKey[key]; ok {
		close(ch)
		delete(w.byKey, key)
	}
}
