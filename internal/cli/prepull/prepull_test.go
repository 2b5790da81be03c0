package prepull

import (
	"bytes"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func TestPrintNodes(t *testing.T) {
	job := &v1alpha1.PrepullJob{Spec: v1alpha1.PrepullJobSpec{Images: []string{"a", "b", "c"}},
		Status: v1alpha1.PrepullJobStatus{Nodes: []v1alpha1.NodePrepullStatus{
			{Node: "node-a", Phase: v1alpha1.PrepullSucceeded, Pulled: 2, Present: 1},
			{Node: "node-b", Phase: v1alpha1.PrepullFailed, Pulled: 2, Failed: 1, Message: "1 of 3 images failed to pull",
				Failures: []v1alpha1.ImagePullFailure{{Image: "c", Message: "failed to resolve image: c: not found"}}},
			{Node: "node-c", Phase: v1alpha1.PrepullStopped, Pulled: 1, Pending: 2,
				Message: "the image filesystem is 81% full (81Gi of 100Gi), at or past the high-water mark of 80% (the job's, within the agent's --max-high-water); no more pulls"},
		}}}
	var out bytes.Buffer
	if err := printNodes(&out, nodecache.Progress(job, []string{"node-a", "node-b", "node-c", "node-d"})); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "nodes", out.String())
}
