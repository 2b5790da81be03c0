package metrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The series are served with their bounded labels and the values recorded.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := New("pipelined")
	m.Phase("claim", "gke-a", 300*time.Millisecond)
	m.Claim("gke-a", true)
	m.Task("gke-a", false, 2*time.Second)
	m.Warm("gke-a", 4)
	m.Warm("gke-a", -1)
	m.Run(true, time.Minute)
	addr, err := m.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`asrl_phase_latency_seconds_count{cluster="gke-a",phase="claim",strategy="pipelined"} 1`,
		`asrl_claims_total{cluster="gke-a",status="ok",strategy="pipelined"} 1`,
		`asrl_tasks_total{cluster="gke-a",status="error",strategy="pipelined"} 1`,
		`asrl_task_latency_seconds_sum{cluster="gke-a",status="error",strategy="pipelined"} 2`,
		`asrl_warm_replicas{cluster="gke-a"} 3`,
		`asrl_run_latency_seconds_count{status="ok",strategy="pipelined"} 1`,
		`process_resident_memory_bytes`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
