package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// TestRegistryReadsBounded: a tenant choosing images of a registry that
// never answers — 10,000 dry-run Pods, then 10,000 Pods, each of its own
// tag — leaves the webhook's goroutines and heap bounded. Dry runs read
// no registry at all; the others queue what fits and drop the rest.
func TestRegistryReadsBounded(t *testing.T) {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	silent := silentRegistry(t)
	s, clients := startWebhook(t, ns)
	pol := &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "silent-registry-" + ns}, Spec: v1alpha1.SandboxPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		Images:            &v1alpha1.ImagePolicy{AllowedRegistries: []string{silent}},
		NodeCache:         &v1alpha1.NodeCachePolicy{},
	}}
	if err := clients.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Client.Delete(context.Background(), pol) })
	if err := s.WaitForPolicySet(ctx, ns, true); err != nil {
		t.Fatal(err)
	}

	apiServer := s.AsAPIServer()
	send := func(from, n int, dryRun bool) {
		t.Helper()
		var wg sync.WaitGroup
		work := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range work {
					pod, _ := json.Marshal(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: ns, Labels: map[string]string{policy.SandboxPodLabel: "h"}},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: fmt.Sprintf("%s/swebench/task:%d", silent, i)}}}})
					body := strings.Replace(review(ns, pod), `"operation":"CREATE"`, fmt.Sprintf(`"operation":"CREATE","dryRun":%v`, dryRun), 1)
					resp, err := apiServer.Post(s.URL+webhook.MutatePodsPath, "application/json", strings.NewReader(body))
					if err != nil {
						t.Error(err)
						continue
					}
					var b bytes.Buffer
					_, _ = b.ReadFrom(resp.Body)
					resp.Body.Close()
					if !strings.Contains(b.String(), `"allowed":true`) {
						t.Errorf("Pod %d: %s", i, b.String())
					}
				}
			})
		}
		for i := range n {
			work <- from + i
		}
		close(work)
		wg.Wait()
	}
	// Warm up: the webhook follows the nodes' caches from the first Pod
	// a nodeCache policy governs.
	send(0, 50, false)
	before := goMetrics(t, s)

	send(100, 10000, true)
	afterDry := goMetrics(t, s)
	send(20000, 10000, false)
	after := goMetrics(t, s)

	t.Logf("goroutines %v → %v after 10,000 dry runs → %v after 10,000 Pods; heap in use %.0f → %.0f → %.0f MiB",
		before["go_goroutines"], afterDry["go_goroutines"], after["go_goroutines"],
		before["go_memstats_heap_inuse_bytes"]/(1<<20), afterDry["go_memstats_heap_inuse_bytes"]/(1<<20), after["go_memstats_heap_inuse_bytes"]/(1<<20))
	// A dry run reads no registry: no reader, no connection.
	if grown := afterDry["go_goroutines"] - before["go_goroutines"]; grown > 16 {
		t.Errorf("10,000 dry runs grew the webhook by %.0f goroutines, want at most 16", grown)
	}
	// Four readers, each with a connection's few goroutines, however many
	// images are asked for.
	if grown := after["go_goroutines"] - before["go_goroutines"]; grown > 48 {
		t.Errorf("10,000 Pods of a silent registry grew the webhook by %.0f goroutines, want at most 48", grown)
	}
	if heap := after["go_memstats_heap_inuse_bytes"]; heap > 128<<20 {
		t.Errorf("the webhook's heap is %.0f MiB in use, want at most 128", heap/(1<<20))
	}
}

// silentRegistry is the address of a server that accepts connections and
// never answers on them.
func silentRegistry(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return l.Addr().String()
}

// goMetrics are the Go runtime's gauges the webhook's /metrics serves.
func goMetrics(t *testing.T, s *testwebhook.Server) map[string]float64 {
	t.Helper()
	b, err := s.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(b, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "go_") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	if _, ok := out["go_goroutines"]; !ok {
		t.Fatalf("the webhook's metrics have no go_goroutines:\n%s", b)
	}
	return out
}
