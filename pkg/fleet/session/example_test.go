package session_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// cluster is the test cluster (kwok nodes) the example runs on.
var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// A Go trainer embeds a session: tasks added, a sandbox acquired for one
// and released, the session closed with nothing left behind.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients, err := cluster.Clients("default")
	if err != nil {
		panic(err)
	}
	targets := []fleet.Target{{Config: config.Cluster{Name: "kwok", Weight: 1}, Clients: clients}}
	cfg := config.Default()
	cfg.MaxConcurrent = 2
	s, err := session.Open(ctx, "example-session", cfg, nil, targets, session.Options{})
	if err != nil {
		panic(err)
	}

	if _, err := s.AddTasks([]tasks.Task{{ID: "t1", Image: "example.com/swe/astropy:1"}}, "the trainer"); err != nil {
		panic(err)
	}
	h, err := s.Acquire(ctx, session.AcquireRequest{ClientID: "trainer-0", TaskID: "t1"})
	if err != nil {
		panic(err)
	}
	fmt.Println("acquired a sandbox of", h.Image, "for", h.TaskID)
	outcome, err := s.Release(ctx, h.Claim, "trainer-0", false)
	if err != nil {
		panic(err)
	}
	fmt.Println(outcome)
	// Close tears the session's objects down, and waits until they are gone.
	if err := s.Close(ctx); err != nil {
		panic(err)
	}
	// Output:
	// acquired a sandbox of example.com/swe/astropy:1 for t1
	// released
}
