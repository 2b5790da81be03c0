package sessionstate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/sessionstate"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

var cluster *testcluster.Cluster

// The API server alone: the state is ConfigMaps.
func TestMain(m *testing.M) {
	testcluster.Main(m, &cluster, testcluster.WithoutAgentSandbox(), testcluster.WithNodes())
}

// What a session records reads back as it was: its configuration,
// options, clients and 25,001 tasks over three ConfigMaps, grown in two
// steps; a second session of the run is refused; Delete leaves nothing.
func TestRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, err := cluster.Clients(cluster.NewNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	store := &sessionstate.Store{Client: clients.Client, Namespace: clients.Namespace, RunID: "state-1"}
	cfg := config.Default()
	cfg.MaxConcurrent = 7
	opts := sessionstate.Options{LeaseTTL: metav1.Duration{Duration: 20 * time.Second}, WarmTTL: metav1.Duration{Duration: time.Hour}}
	var ts []tasks.Task
	for i := range 25001 {
		ts = append(ts, tasks.Task{ID: fmt.Sprintf("t%05d", i), Image: fmt.Sprintf("example.com/swe/p%d:1", i%300),
			OriginalImage: "docker.io/x:1", Metadata: map[string]any{"kept": "by the trainer only"}})
	}
	if err := store.Create(ctx, cfg, opts, ts[:9000]); err != nil {
		t.Fatal(err)
	}
	if err := store.SaveTasks(ctx, ts, 9000); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Minute).Round(time.Second).UTC()
	cs := sessionstate.Clients{Owner: "a", Clients: map[string]sessionstate.Client{"a": {KeySHA256: "aa", Expires: expires}}}
	if err := store.SaveClients(ctx, cs); err != nil {
		t.Fatal(err)
	}

	st, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Config.MaxConcurrent != 7 || st.Options != opts {
		t.Errorf("config %d, options %+v; want 7, %+v", st.Config.MaxConcurrent, st.Options, opts)
	}
	if st.Clients.Owner != "a" || !st.Clients.Clients["a"].Expires.Equal(expires) || st.Clients.Clients["a"].KeySHA256 != "aa" {
		t.Errorf("clients %+v, want %+v", st.Clients, cs)
	}
	if len(st.Tasks) != len(ts) {
		t.Fatalf("%d tasks read back, want %d", len(st.Tasks), len(ts))
	}
	for i, got := range st.Tasks {
		want := ts[i]
		want.Metadata = nil
		if got.ID != want.ID || got.Image != want.Image || got.OriginalImage != want.OriginalImage || got.Metadata != nil {
			t.Fatalf("task %d read back as %+v, want %+v", i, got, want)
		}
	}

	if err := store.Create(ctx, cfg, opts, nil); err == nil || !strings.Contains(err.Error(), "serve --resume state-1") {
		t.Errorf("a second session of the run: %v, want refused with how to resume", err)
	}
	if err := store.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Load(ctx); !errors.Is(err, sessionstate.ErrNone) {
		t.Errorf("after Delete: %v, want ErrNone", err)
	}
	left := &corev1.ConfigMapList{}
	if err := clients.Client.List(ctx, left, client.InNamespace(clients.Namespace), client.HasLabels{sessionstate.Part}); err != nil || len(left.Items) > 0 {
		t.Errorf("after Delete: %d ConfigMaps left (%v)", len(left.Items), err)
	}
}
