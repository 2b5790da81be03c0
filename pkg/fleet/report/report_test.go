package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
)

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tt := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"one value", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd", ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		{"median of even is the lower", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 100", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p50 of 100", ms(hundred...), 0.50, 50 * time.Millisecond},
		{"p99 of 10 is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
	} {
		if got := Percentile(tt.sorted, tt.q); got != tt.want {
			t.Errorf("%s: Percentile(%v) = %v, want %v", tt.name, tt.q, got, tt.want)
		}
	}
}

func TestReport(t *testing.T) {
	r := New("pipelined")
	var wg sync.WaitGroup
	for i := 1; i <= 100; i++ {
		wg.Go(func() {
			r.Phase("claim", time.Duration(i)*10*time.Millisecond)
			r.Claim(i%4 != 0)
			r.Task(i%10 != 0, i%20 != 0)
		})
	}
	wg.Wait()
	r.Phase("zeta", time.Second)
	r.Phase("teardown", 2*time.Second)
	r.Phase("preflight", time.Second/2)
	r.Warm(8)
	r.Warm(-3)
	r.Warm(4)
	rep := r.Report(42 * time.Second)

	var names []string
	for _, p := range rep.Phases {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "preflight,claim,teardown,zeta" {
		t.Errorf("phase order %s", got)
	}
	claim := rep.Phases[1]
	if claim.Count != 100 || claim.P50 != 0.5 || claim.P99 != 0.99 || claim.Max != 1.0 || claim.Total < 50.49 || claim.Total > 50.51 {
		t.Errorf("claim phase %+v", claim)
	}
	if rep.Claims != 100 || rep.ClaimsWarm != 75 || rep.TasksOK != 90 || rep.TasksErr != 10 || rep.TasksNotRun != 5 || rep.WarmReplicasTotal != 12 || rep.WarmReplicasPeak != 9 {
		t.Errorf("report %+v", rep)
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Run report (strategy pipelined)", "claim    100", "0.99s", "42.00s", "tasks 90 ok / 10 failed (5 could not run), warm replicas 12 in all, 9 at peak"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.Phases[1] != claim || back.WarmReplicasPeak != 9 {
		t.Errorf("JSON round trip: %v %+v", err, back)
	}
}

func TestWriteTable(t *testing.T) {
	rep := Report{
		Strategy: "pipelined", WallSeconds: 17.71, Claims: 12, ClaimsWarm: 9, TasksOK: 8, TasksErr: 4, TasksNotRun: 1, WarmReplicasTotal: 4, WarmReplicasPeak: 3, SandboxesPeak: 5,
		Phases: []Phase{
			{Name: "wait_pool_ready", Count: 3, Total: 14.4, P50: 4.54, P99: 6.51, Max: 6.51},
			{Name: "claim", Count: 12, Total: 25.52, P50: 1.56, P99: 5.06, Max: 5.06},
		},
		Environment: map[string]Environment{
			"gpu-west": {Server: "https://10.0.0.1", Namespace: "rl", KubernetesVersion: "v1.36.3", Nodes: 40, NodePools: []string{"a", "b"}},
			"cpu-east": {Server: "https://10.0.0.2", Namespace: "rl", KubernetesVersion: "v1.35.1", Nodes: 8},
		},
		Throttled: &Throttled{Requests: 37, TotalSeconds: 4.2, MaxSeconds: 0.31},
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "report", out.String())
}
