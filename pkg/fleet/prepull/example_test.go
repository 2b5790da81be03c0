package prepull_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/prepull"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// cluster is the test cluster (a control plane with kwok nodes) the
// example runs on.
var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// A run's PrepullJobs carry its run id; reap deletes them with the rest
// of the run, and the images the nodes pulled stay for the next run.
func ExampleDeleteOfRun() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, err := cluster.Clients("default")
	if err != nil {
		panic(err)
	}
	for _, run := range []string{"run-1", "run-1", "run-2"} {
		job := &v1alpha1.PrepullJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: run + "-prepull-", Labels: labels.ForRun(run)},
			Spec:       v1alpha1.PrepullJobSpec{Images: []string{"example.com/swe/astropy:1"}},
		}
		if err := clients.Client.Create(ctx, job); err != nil {
			panic(err)
		}
	}
	deleted, err := prepull.DeleteOfRun(ctx, clients.Client, "default", "run-1")
	if err != nil {
		panic(err)
	}
	left1, _ := prepull.OfRun(ctx, clients.Client, "default", "run-1")
	left2, _ := prepull.OfRun(ctx, clients.Client, "default", "run-2")
	fmt.Println("deleted:", len(deleted), "left of run-1:", len(left1), "of run-2:", len(left2))
	// Output:
	// deleted: 2 left of run-1: 0 of run-2: 1
}
