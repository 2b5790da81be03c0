package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"connectrpc.com/connect"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleetclient"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// A PrepullJob pulls its images onto the node through the agent, shows
// its progress, and with deleteWhenDone removes them when it is deleted;
// an image that does not exist fails with the registry's reason, and a
// disk budget the node is past stops the pulls and says why.
func TestPrepullJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := theNode(t)
	n.agent.Start(t, ctx)
	prepullJobs(t, ctx, n)
}

func prepullJobs(t *testing.T, ctx context.Context, n *sandboxNode) {
	clients, err := kube.ForConfig(restConfig(), newNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	node := n.name
	onTheNode := map[string]string{corev1.LabelHostname: node}

	t.Run("pulls, reports, and removes when deleted", func(t *testing.T) {
		a, _ := n.pushNewImage(t, ctx, "prepull-a")
		b, _ := n.pushNewImage(t, ctx, "prepull-b")
		job := newJob(clients.Namespace, "two-images", []string{a, b}, onTheNode)
		job.Spec.DeleteWhenDone = true
		if err := clients.Client.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		phases := map[v1alpha1.PrepullPhase]bool{}
		entry := waitForEntry(t, ctx, clients, job, node, func(e v1alpha1.NodePrepullStatus) bool {
			phases[e.Phase] = true
			return e.Phase != v1alpha1.PrepullPulling
		})
		if entry.Phase != v1alpha1.PrepullSucceeded || entry.Pulled != 2 || entry.Pending != 0 || entry.Failed != 0 {
			t.Fatalf("node entry %+v, want both images pulled", entry)
		}
		if !phases[v1alpha1.PrepullPulling] {
			t.Errorf("no progress was shown before the job completed: phases %v", phases)
		}
		for _, img := range []string{a, b} {
			n.waitForImage(t, ctx, img, true)
		}
		if err := clients.Client.Delete(ctx, job); err != nil {
			t.Fatal(err)
		}
		for _, img := range []string{a, b} {
			n.waitForImage(t, ctx, img, false)
		}
	})

	t.Run("a finished job is deleted after its TTL, and its images removed", func(t *testing.T) {
		d, _ := n.pushNewImage(t, ctx, "prepull-d")
		job := newJob(clients.Namespace, "with-ttl", []string{d}, onTheNode)
		job.Spec.DeleteWhenDone = true
		job.Spec.TTLSecondsAfterFinished = ptr.To[int32](1)
		if err := clients.Client.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		entry := waitForEntry(t, ctx, clients, job, node, func(e v1alpha1.NodePrepullStatus) bool { return e.Phase != v1alpha1.PrepullPulling })
		if entry.Phase != v1alpha1.PrepullSucceeded {
			t.Fatalf("node entry %+v, want the image pulled", entry)
		}
		for {
			err := clients.Client.Get(ctx, client.ObjectKeyFromObject(job), &v1alpha1.PrepullJob{})
			if apierrors.IsNotFound(err) {
				break
			}
			if err != nil || ctx.Err() != nil {
				t.Fatalf("the job is still there %v after it finished, with ttlSecondsAfterFinished 1 (%v)", time.Since(entry.UpdateTime.Time), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if late := time.Since(entry.UpdateTime.Time); late < time.Second {
			t.Errorf("the job was deleted %v after it finished, before its TTL of 1s", late)
		}
		n.waitForImage(t, ctx, d, false)
	})

	t.Run("a nonexistent image fails with why", func(t *testing.T) {
		missing := "docker.io/sandbox-fleet/does-not-exist:1"
		present, _ := n.pushNewImage(t, ctx, "prepull-present")
		first := newJob(clients.Namespace, "present-first", []string{present}, onTheNode)
		if err := clients.Client.Create(ctx, first); err != nil {
			t.Fatal(err)
		}
		if e := waitForEntry(t, ctx, clients, first, node, func(e v1alpha1.NodePrepullStatus) bool { return e.Phase != v1alpha1.PrepullPulling }); e.Phase != v1alpha1.PrepullSucceeded {
			t.Fatalf("node entry %+v, want %s pulled", e, present)
		}
		job := newJob(clients.Namespace, "missing-image", []string{present, missing}, onTheNode)
		if err := clients.Client.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		entry := waitForEntry(t, ctx, clients, job, node, func(e v1alpha1.NodePrepullStatus) bool { return e.Phase != v1alpha1.PrepullPulling })
		if entry.Phase != v1alpha1.PrepullFailed || entry.Present != 1 || entry.Failed != 1 || len(entry.Failures) != 1 ||
			entry.Failures[0].Image != missing || !strings.Contains(entry.Failures[0].Message, "not found") {
			t.Errorf("node entry %+v, want %s present and %s failed as not found", entry, present, missing)
		}
	})

	t.Run("an image from a registry the agent may not pull from fails with why", func(t *testing.T) {
		private := "private.example.com/team/model:1"
		job := newJob(clients.Namespace, "not-allowed", []string{private}, onTheNode)
		// Installed, the agent's admission policy refuses the job when
		// made; the agent, which does not count on it, refuses it too.
		err := clients.Client.Create(ctx, job)
		if _, installed := n.agent.(*installedAgent); installed {
			if err == nil || !strings.Contains(err.Error(), "is from none of the registries asrl-prepull-agent may pull from") {
				t.Errorf("creating a job of %s: %v, want it refused for its registry", private, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		entry := waitForEntry(t, ctx, clients, job, node, func(e v1alpha1.NodePrepullStatus) bool { return e.Phase != v1alpha1.PrepullPulling })
		if entry.Phase != v1alpha1.PrepullFailed || entry.Failed != 1 || len(entry.Failures) != 1 ||
			!strings.Contains(entry.Failures[0].Message, "is from none of the registries this node's asrl-prepull-agent may pull from") {
			t.Errorf("node entry %+v, want %s refused by the agent's --allowed-registries", entry, private)
		}
	})

	t.Run("a disk budget the node is past stops the pulls", func(t *testing.T) {
		fs, err := n.images.Filesystem(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if nodecache.Admit(fs, 1, nodecache.Reservations{}).Decision != nodecache.Stop {
			t.Skipf("the image filesystem is under 1%% full: %+v", fs)
		}
		c, _ := n.pushNewImage(t, ctx, "prepull-c")
		job := newJob(clients.Namespace, "over-budget", []string{c}, onTheNode)
		job.Spec.DiskHighWaterPercent = 1
		if err := clients.Client.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		entry := waitForEntry(t, ctx, clients, job, node, func(e v1alpha1.NodePrepullStatus) bool { return e.Phase != v1alpha1.PrepullPulling })
		if entry.Phase != v1alpha1.PrepullStopped || entry.Pending != 1 || !strings.Contains(entry.Message, "high-water mark of 1%") {
			t.Errorf("node entry %+v, want it stopped before pulling, saying why", entry)
		}
		if has, err := n.images.Has(ctx, c); err != nil || has {
			t.Errorf("%s was pulled past the disk budget (%v)", c, err)
		}
	})
}

// An agent that restarts still removes what it pulled for deleteWhenDone
// jobs: those deleted while it was down when it starts, and those deleted
// after.
func TestPrepullAcrossAgentRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := theNode(t)
	n.agent.Start(t, ctx)
	prepullAcrossAgentRestart(t, ctx, n)
}

func prepullAcrossAgentRestart(t *testing.T, ctx context.Context, n *sandboxNode) {
	clients, err := kube.ForConfig(restConfig(), newNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*v1alpha1.PrepullJob
	var images []string
	for _, name := range []string{"deleted-while-down", "deleted-after"} {
		img, _ := n.pushNewImage(t, ctx, "restart-"+name)
		job := newJob(clients.Namespace, name, []string{img}, map[string]string{corev1.LabelHostname: n.name})
		job.Spec.DeleteWhenDone = true
		if err := clients.Client.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		if e := waitForEntry(t, ctx, clients, job, n.name, func(e v1alpha1.NodePrepullStatus) bool { return e.Phase != v1alpha1.PrepullPulling }); e.Phase != v1alpha1.PrepullSucceeded {
			t.Fatalf("node entry %+v, want the image pulled", e)
		}
		n.waitForImage(t, ctx, img, true)
		jobs, images = append(jobs, job), append(images, img)
	}
	n.agent.Restart(t, ctx, func() {
		if err := clients.Client.Delete(ctx, jobs[0]); err != nil {
			t.Fatal(err)
		}
	})
	n.waitForImage(t, ctx, images[0], false)
	if has, err := n.images.Has(ctx, images[1]); err != nil || !has {
		t.Fatalf("%s, whose job is still there, is gone (%v)", images[1], err)
	}
	if err := clients.Client.Delete(ctx, jobs[1]); err != nil {
		t.Fatal(err)
	}
	n.waitForImage(t, ctx, images[1], false)
}

// kubectl sandbox-fleet prepull --wait creates the job, shows progress and
// the nodes' results, and fails when a node could not pull everything.
func TestPrepullVerb(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := theNode(t)
	n.agent.Start(t, ctx)
	ns := newNamespace(t)
	// The agent publishes its NodeImageCache, which marks its node as one
	// that pulls.
	clients, err := kube.ForConfig(restConfig(), ns)
	if err != nil {
		t.Fatal(err)
	}
	waitForCache(t, ctx, clients, n.name, func(*v1alpha1.NodeImageCache) bool { return true })

	a, _ := n.pushNewImage(t, ctx, "verb-a")
	b, _ := n.pushNewImage(t, ctx, "verb-b")
	taskFile := filepath.Join(t.TempDir(), "images.txt")
	if err := os.WriteFile(taskFile, []byte(a+"\n"+b+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	onTheNode := corev1.LabelHostname + "=" + n.name
	// The high-water mark the shipped agent allows at most: the test
	// machine's disk may be fuller than the default 80%.
	code, out, stderr := plugin("prepull", "-n", ns, "--tasks", taskFile, "-l", onTheNode, "--prepull-high-water", strconv.Itoa(highWater), "--wait", "-o", "json")
	var p nodecache.JobProgress
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil {
		t.Fatalf("prepull --wait: exit %d\n%s%s", code, out, stderr)
	}
	if !p.Finished() || p.Succeeded != 1 || p.Pulled != 2 || !strings.Contains(stderr, "1/1 nodes done: 2 pulled") {
		t.Errorf("prepull --wait: %+v\n%s", p, stderr)
	}
	for _, img := range []string{a, b} {
		n.waitForImage(t, ctx, img, true)
	}

	c, _ := n.pushNewImage(t, ctx, "verb-c")
	if err := os.WriteFile(taskFile, []byte(c+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = plugin("prepull", "-n", ns, "--tasks", taskFile, "-l", onTheNode, "--prepull-high-water", "1", "--wait")
	if code != 1 || !strings.Contains(out, "Stopped") || !strings.Contains(out, "high-water mark of 1%") || !strings.Contains(stderr, "1 node did not get every image") {
		t.Errorf("prepull --wait past the disk budget: exit %d\n%s%s", code, out, stderr)
	}
}

// highWater is the disk high-water mark the tests' jobs ask for: the most
// the shipped agent allows (manifests/prepull-agent's max-high-water).
const highWater = 85

func newJob(ns, name string, images []string, nodeSelector map[string]string) *v1alpha1.PrepullJob {
	return &v1alpha1.PrepullJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.PrepullJobSpec{Images: images, NodeSelector: nodeSelector, PerNodeParallelism: 2, DiskHighWaterPercent: highWater}}
}

// waitForEntry follows job until its entry for node satisfies ok.
func waitForEntry(t *testing.T, ctx context.Context, clients *kube.Clients, job *v1alpha1.PrepullJob, node string, ok func(v1alpha1.NodePrepullStatus) bool) v1alpha1.NodePrepullStatus {
	t.Helper()
	// A watch from the job as created sees every write of its status:
	// a poll misses a state shorter than its interval, as the Pulling of
	// two small images on a fast node is.
	rv := job.ResourceVersion
	var last []v1alpha1.NodePrepullStatus
	for {
		w, err := clients.Client.Watch(ctx, &v1alpha1.PrepullJobList{}, &client.ListOptions{Namespace: job.Namespace,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", job.Name), Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			t.Fatal(err)
		}
		for ev := range w.ResultChan() {
			current, isJob := ev.Object.(*v1alpha1.PrepullJob)
			if !isJob {
				continue
			}
			rv, last = current.ResourceVersion, current.Status.Nodes
			for _, e := range current.Status.Nodes {
				if e.Node == node && ok(e) {
					w.Stop()
					return e
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("PrepullJob %s: node %s's entry never got there: %+v", job.Name, node, last)
		}
	}
}

// pullingNode starts the node's agent and waits for its cache to be
// published, and returns the node, a namespace of the test's, its client
// and a new image, name, no node has.
func pullingNode(t *testing.T, ctx context.Context, name string) (*sandboxNode, string, *kube.Clients, string) {
	t.Helper()
	n := theNode(t)
	n.agent.Start(t, ctx)
	ns := newNamespace(t)
	clients, err := kube.ForConfig(restConfig(), ns)
	if err != nil {
		t.Fatal(err)
	}
	waitForCache(t, ctx, clients, n.name, func(*v1alpha1.NodeImageCache) bool { return true })
	img, _ := n.pushNewImage(t, ctx, name)
	return n, ns, clients, img
}

// run --prepull has the node pull the run's images before warming, and
// deletes its PrepullJob at the end.
func TestRunPrepull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, ns, clients, img := pullingNode(t, ctx, "run-prepull")
	taskFile := filepath.Join(t.TempDir(), "tasks.jsonl")
	rows := `{"id": "t1", "image": "` + img + `"}` + "\n" + `{"id": "t2", "image": "` + img + `"}` + "\n"
	if err := os.WriteFile(taskFile, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := plugin("run", "-n", ns, "--tasks", taskFile, "--prepull", "--prepull-high-water", strconv.Itoa(highWater), "--max-concurrent", "1",
		"--ready-timeout", "3m", "-o", "json", "--", "true")
	var rep report.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.TasksOK != 2 {
		t.Fatalf("run --prepull: exit %d\n%s%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "pre-pulling 1 image") || strings.Contains(stderr, "Prepull:") {
		t.Errorf("run --prepull did not pre-pull cleanly:\n%s", stderr)
	}
	prepulled := false
	for _, p := range rep.Phases {
		prepulled = prepulled || p.Name == "prepull"
	}
	if !prepulled {
		t.Errorf("the report has no prepull phase: %+v", rep.Phases)
	}
	jobs := &v1alpha1.PrepullJobList{}
	if err := clients.Client.List(ctx, jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("the run left %d PrepullJobs (%v)", len(jobs.Items), err)
	}
}

// serve --prepull has the node pull each image as its first task is
// added — before anything asks for a sandbox of it — and deletes its
// PrepullJobs when the session closes.
func TestServePrepull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n, ns, clients, img := pullingNode(t, ctx, "serve-prepull")
	// A directory only this user may enter, as serve requires of a socket's.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "serve.sock")
	served := make(chan string, 1)
	go func() {
		code, _, stderr := plugin("serve", "-n", ns, "--listen", "unix://"+sock, "--prepull", "--prepull-high-water", strconv.Itoa(highWater))
		served <- fmt.Sprintf("exit %d\n%s", code, stderr)
	}()
	c, err := fleetclient.New("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddTasks(ctx, connect.NewRequest(&fleetv1.AddTasksRequest{Tasks: []*fleetv1.Task{{Id: "t1", Image: img}}})); err != nil {
		t.Fatal(err)
	}
	n.waitForImage(t, ctx, img, true)
	if _, err := c.Close(ctx, connect.NewRequest(&fleetv1.CloseRequest{})); err != nil {
		t.Fatal(err)
	}
	if out := <-served; !strings.HasPrefix(out, "exit 0") || strings.Contains(out, "prepull on cluster") {
		t.Errorf("serve --prepull: %s", out)
	}
	jobs := &v1alpha1.PrepullJobList{}
	if err := clients.Client.List(ctx, jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("the session left %d PrepullJobs (%v)", len(jobs.Items), err)
	}
}
