package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
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
	// Requests counts the API requests the client made, watches excepted.
	Requests int64
}

// measurement is one trial's figures.
type measurement struct {
	P50, P99                   float64
	ClaimsPerSec               float64
	WarmShare                  float64
	RequestsPerTask            float64
	ServerClaimRequestsPerTask float64
	CPUSeconds, RSSMiB         float64
	WallSeconds                float64
}

func (r trialResult) measure(sc scenario) measurement {
	sorted := slices.Clone(r.TimeToSandbox)
	slices.Sort(sorted)
	wall := r.Last.Sub(r.First).Seconds()
	return measurement{
		P50: percentile(sorted, 0.50), P99: percentile(sorted, 0.99),
		ClaimsPerSec:    float64(len(sorted)) / wall,
		RequestsPerTask: float64(r.Requests) / float64(sc.Tasks),
		WallSeconds:     wall,
	}
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
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

// counting counts the requests sent through it, watches excepted.
type counting struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Get("watch") != "true" {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

func runTrial(client, kubeconfig, namespace string, sc scenario) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	var requests atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counting{next: rt, n: &requests} })
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
	default:
		err = fmt.Errorf("unknown client %q", client)
	}
	if err != nil {
		return err
	}
	res.Requests = requests.Load()
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
	}})
	return res, err
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

// bare is the bare-minimum client: the same pools, then per task create a
// claim, wait for it to be Ready through one shared informer, delete it.
func bare(ctx context.Context, clients *kube.Clients, sc scenario) (trialResult, error) {
	ns := clients.Namespace
	c, err := cache.New(clients.Config, cache.Options{Scheme: kube.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return trialResult{}, err
	}
	var mu sync.Mutex
	changed := make(chan struct{})
	notify := func() {
		mu.Lock()
		close(changed)
		changed = make(chan struct{})
		mu.Unlock()
	}
	next := func() <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		return changed
	}
	handler := toolscache.ResourceEventHandlerFuncs{AddFunc: func(any) { notify() }, UpdateFunc: func(any, any) { notify() }, DeleteFunc: func(any) { notify() }}
	for _, obj := range []client.Object{&extensionsv1beta1.SandboxClaim{}, &extensionsv1beta1.SandboxWarmPool{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return trialResult{}, err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return trialResult{}, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return trialResult{}, fmt.Errorf("cache sync: %w", ctx.Err())
	}
	waitFor := func(obj client.Object, done func() bool) error {
		for {
			ch := next()
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); client.IgnoreNotFound(err) != nil {
				return err
			} else if err == nil && done() {
				return nil
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}

	pools := map[string]*extensionsv1beta1.SandboxWarmPool{}
	for _, t := range batch(sc) {
		if pools[t.Image] != nil {
			continue
		}
		tmpl, err := resources.Template(ns, "bare", t.Image, resources.PodSpec{})
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
		if err := waitFor(got, func() bool { return got.Status.ReadyReplicas >= int32(sc.Replica) }); err != nil {
			return trialResult{}, err
		}
	}

	var res trialResult
	var resMu sync.Mutex
	claimCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	one := func(t tasks.Task) error {
		asked := time.Now()
		claim := resources.Claim(pools[t.Image], t.ID)
		if err := clients.Client.Create(claimCtx, claim); err != nil {
			return err
		}
		if err := waitFor(claim, func() bool {
			return apimeta.IsStatusConditionTrue(claim.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
		}); err != nil {
			return err
		}
		ready := time.Now()
		resMu.Lock()
		res.add(asked, ready, claim.Status.SandboxStatus.Name)
		resMu.Unlock()
		return clients.Client.Delete(claimCtx, claim)
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
		if err := clients.Client.DeleteAllOf(ctx, obj, client.InNamespace(ns), client.MatchingLabels(labels.ForRun("bare"))); err != nil {
			return trialResult{}, err
		}
	}
	return res, nil
}
