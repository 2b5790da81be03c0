package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// observer remembers the launch type of every Sandbox it sees, in every
// namespace, from one watch.
type observer struct {
	mu     sync.Mutex
	launch map[string]string // namespace/name -> warm or cold
}

func observe(ctx context.Context, cluster *testcluster.Cluster) (*observer, error) {
	c, err := cache.New(cluster.RESTConfig(), cache.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, err
	}
	o := &observer{launch: map[string]string{}}
	record := func(obj any) {
		if sb, ok := obj.(*sandboxv1beta1.Sandbox); ok {
			if lt := sb.Labels[sandboxv1beta1.SandboxLaunchTypeLabel]; lt != "" {
				o.mu.Lock()
				o.launch[sb.Namespace+"/"+sb.Name] = lt
				o.mu.Unlock()
			}
		}
	}
	inf, err := c.GetInformer(ctx, &sandboxv1beta1.Sandbox{})
	if err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("watching sandboxes: %w", ctx.Err())
	}
	return o, nil
}

// warmShare is the share of sandboxes of namespace ns that were warm.
func (o *observer) warmShare(ns string, sandboxes []string) float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	warm := 0
	for _, name := range sandboxes {
		if o.launch[ns+"/"+name] == sandboxv1beta1.SandboxLaunchTypeWarm {
			warm++
		}
	}
	return float64(warm) / float64(max(1, len(sandboxes)))
}

// claimRequests sums the API server's count of SandboxClaim creates and
// deletes.
func claimRequests(ctx context.Context, cluster *testcluster.Cluster) (float64, error) {
	kc, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		return 0, err
	}
	body, err := kc.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="sandboxclaims"`) ||
			!strings.Contains(line, `subresource=""`) || !(strings.Contains(line, `verb="POST"`) || strings.Contains(line, `verb="DELETE"`)) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		total += v
	}
	return total, sc.Err()
}

// newNamespace creates a namespace ready for the controller's Pods.
func newNamespace(ctx context.Context, cluster *testcluster.Cluster) (string, error) {
	kc, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		return "", err
	}
	return testcluster.CreateNamespace(ctx, kc, "bench-")
}

func deleteNamespace(cluster *testcluster.Cluster, ns string) {
	kc, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err == nil {
		_ = kc.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}
}

// summary is a client's figures in a scenario: the median over rounds.
type summary struct {
	Scenario string `json:"scenario"`
	Client   string `json:"client"`
	Rounds   int    `json:"rounds"`
	measurement
}

func summarize(sc scenario, client string, ms []measurement) summary {
	med := func(get func(measurement) float64) float64 {
		vs := make([]float64, len(ms))
		for i, m := range ms {
			vs[i] = get(m)
		}
		slices.Sort(vs)
		if len(vs)%2 == 1 {
			return vs[len(vs)/2]
		}
		return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	kinds := map[string]float64{}
	for _, m := range ms {
		for k := range m.RequestsByKind {
			kinds[k] = 0
		}
	}
	for k := range kinds {
		kinds[k] = med(func(m measurement) float64 { return m.RequestsByKind[k] })
	}
	return summary{Scenario: sc.Name, Client: client, Rounds: len(ms), measurement: measurement{
		RequestsByKind: kinds,
		P50:            med(func(m measurement) float64 { return m.P50 }), P99: med(func(m measurement) float64 { return m.P99 }),
		ClaimsPerSec:               med(func(m measurement) float64 { return m.ClaimsPerSec }),
		WarmShare:                  med(func(m measurement) float64 { return m.WarmShare }),
		RequestsPerTask:            med(func(m measurement) float64 { return m.RequestsPerTask }),
		ServerClaimRequestsPerTask: med(func(m measurement) float64 { return m.ServerClaimRequestsPerTask }),
		CPUSeconds:                 med(func(m measurement) float64 { return m.CPUSeconds }),
		RSSMiB:                     med(func(m measurement) float64 { return m.RSSMiB }),
		WallSeconds:                med(func(m measurement) float64 { return m.WallSeconds }),
		StartToFirstClaim:          med(func(m measurement) float64 { return m.StartToFirstClaim }),
		TeardownSeconds:            med(func(m measurement) float64 { return m.TeardownSeconds }),
		ProcessWallSeconds:         med(func(m measurement) float64 { return m.ProcessWallSeconds }),
	}}
}

// printTable prints every summary with its ratios to the bare client's.
func printTable(w io.Writer, all []summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCLIENT\tP50\tP99 (×bare)\tCLAIMS/S (×bare)\tWARM\tREQ/TASK\tSERVER CLAIM REQ/TASK\tCPU (×bare)\tRSS\tWALL (×bare)\tSTART→1ST CLAIM\tLAST TASK→NOTHING LEFT\tPROCESS WALL (×bare)")
	base := map[string]summary{}
	for _, s := range all {
		if s.Client == "bare" {
			base[s.Scenario] = s
		}
	}
	for _, s := range all {
		b := base[s.Scenario]
		fmt.Fprintf(tw, "%s\t%s\t%.3fs\t%.3fs (%.2f)\t%.1f (%.2f)\t%.0f%%\t%.2f\t%.2f\t%.1fs (%.2f)\t%.0fMiB\t%.1fs (%.2f)\t%.2fs\t%.2fs\t%.1fs (%.2f)\n",
			s.Scenario, s.Client, s.P50, s.P99, s.P99/b.P99, s.ClaimsPerSec, s.ClaimsPerSec/b.ClaimsPerSec,
			100*s.WarmShare, s.RequestsPerTask, s.ServerClaimRequestsPerTask, s.CPUSeconds, s.CPUSeconds/b.CPUSeconds,
			s.RSSMiB, s.WallSeconds, s.WallSeconds/b.WallSeconds, s.StartToFirstClaim, s.TeardownSeconds,
			s.ProcessWallSeconds, s.ProcessWallSeconds/b.ProcessWallSeconds)
	}
	_ = tw.Flush()
}

// byKind lists requests per task by kind, the most first, leaving out
// kinds under one per hundred tasks.
func byKind(perTask map[string]float64) string {
	kinds := slices.SortedFunc(maps.Keys(perTask), func(a, b string) int {
		return cmp.Or(cmp.Compare(perTask[b], perTask[a]), cmp.Compare(a, b))
	})
	var parts []string
	for _, k := range kinds {
		if perTask[k] >= 0.01 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, perTask[k]))
		}
	}
	return strings.Join(parts, ", ")
}
