package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/version"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// execute runs the plugin with args against the test cluster.
func execute(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code = cli.Execute(streams, append([]string{"--kubeconfig", cluster.Kubeconfig()}, args...))
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	code, out, stderr := execute("version")
	if code != cli.ExitOK || !strings.Contains(out, "Client Version: ") || !strings.Contains(out, "Server Version: v1.36.") {
		t.Fatalf("version: exit %d\n%s%s", code, out, stderr)
	}

	// The test cluster runs the controller as a process: only its line
	// is known, from the API versions served.
	line := "the v1.x line"
	if strings.HasPrefix(cluster.AgentSandboxVersion(), "v0.") {
		line = "the v0.x line"
	}
	if want := "Agent Sandbox Controller: " + line; !strings.Contains(out, want) {
		t.Errorf("version does not say %q:\n%s", want, out)
	}

	code, out, stderr = execute("version", "--client", "-o", "json")
	var v version.Versions
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &v) != nil || v.Client.GitVersion == "" || v.Server != "" || v.AgentSandbox != nil {
		t.Fatalf("version --client -o json: exit %d, %+v\n%s%s", code, v, out, stderr)
	}
}

// The controller's version is its Deployment's image tag, as its release
// manifests install it; one older than the oldest tested gets a warning.
// The Deployment here has no replica: it stands for the release's beside
// the test cluster's controller, which runs as a process.
func TestVersionOfTheController(t *testing.T) {
	ctx := t.Context()
	clients, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	deployments := clients.Kube.AppsV1().Deployments(preflight.ControllerNamespace)
	labels := map[string]string{"app": preflight.ControllerName}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: preflight.ControllerName},
		Spec: appsv1.DeploymentSpec{Replicas: new(int32), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: preflight.ControllerName, Image: "registry.k8s.io/agent-sandbox/agent-sandbox-controller:" + cluster.AgentSandboxVersion()}}}}},
	}
	if _, err := deployments.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deployments.Delete(context.Background(), dep.Name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})
	code, out, stderr := execute("version")
	want := fmt.Sprintf("Agent Sandbox Controller: %s (from the image of Deployment %s/%s)", cluster.AgentSandboxVersion(), preflight.ControllerNamespace, preflight.ControllerName)
	if code != cli.ExitOK || !strings.Contains(out, want) || strings.Contains(stderr, "Warning") {
		t.Errorf("version: exit %d, want %q and no warning:\n%s%s", code, want, out, stderr)
	}

	dep.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/agent-sandbox/agent-sandbox-controller:v0.3.0"
	if _, err := deployments.Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = execute("version", "-o", "json")
	var v version.Versions
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &v) != nil || v.AgentSandbox == nil || v.AgentSandbox.Version != "v0.3.0" {
		t.Errorf("version -o json: exit %d, %+v\n%s%s", code, v, out, stderr)
	}
	if !strings.Contains(stderr, "Warning: Agent Sandbox v0.3.0 is older than the oldest release sandbox-fleet is tested with ("+preflight.TestedAgentSandbox[0]) {
		t.Errorf("version with an old controller does not warn:\n%s", stderr)
	}
	code, out, _ = execute("preflight", "-n", cluster.NewNamespace(t))
	if code != cli.ExitOK || !strings.Contains(out, "agent-sandbox-version") || !strings.Contains(out, "older than the oldest release") {
		t.Errorf("preflight with an old controller: exit %d, want a warning:\n%s", code, out)
	}
}

func TestPreflight(t *testing.T) {
	ns := cluster.NewNamespace(t)
	code, out, stderr := execute("preflight", "-n", ns)
	if code != cli.ExitOK {
		t.Fatalf("preflight -n %s: exit %d\n%s%s", ns, code, out, stderr)
	}
	for _, want := range []string{"CHECK", "crd/sandboxclaims.extensions.agents.x-k8s.io", "ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("preflight table lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = execute("preflight", "-n", ns, "-o", "json")
	var r preflight.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != cli.ExitOK || r.Namespace != ns || len(r.Checks) == 0 {
		t.Fatalf("preflight -o json: exit %d, err %v, report %+v", code, err, r)
	}
}

// A failed check exits 1 with one line saying what is wrong and what to do.
func TestPreflightFailure(t *testing.T) {
	code, out, stderr := execute("preflight", "-n", "no-such-namespace")
	if code != cli.ExitFailure {
		t.Fatalf("exit %d, want %d\n%s%s", code, cli.ExitFailure, out, stderr)
	}
	want := `error: preflight failed (1 of `
	if !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, `namespace "no-such-namespace" does not exist; to fix: create it with `+"`kubectl create namespace no-such-namespace`") {
		t.Errorf("stderr %q does not name the missing namespace and its fix", stderr)
	}
	if !strings.Contains(out, "failed") {
		t.Errorf("the table does not show the failed check:\n%s", out)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"no-such-verb"},
		{"preflight", "--no-such-flag"},
		{"preflight", "extra-argument"},
		{"preflight", "-o", "xml"},
		{"get"},
		{"get", "things"},
		{"get", "runs", "-o", "xml"},
		{"get", "pools", "extra-argument"},
		{"describe", "run"},
		{"describe", "pod", "x"},
		{"plan"},
		{"plan", "--tasks", "no-such-file.jsonl"},
		{"plan", "--tasks", "plan/testdata/tasks.jsonl", "--probe", "--offline"},
		{"plan", "--tasks", "plan/testdata/tasks.jsonl", "--probe", "--pull-bandwidth", "0"},
	} {
		code, _, stderr := execute(args...)
		if code != cli.ExitUsage || !strings.HasPrefix(stderr, "error: ") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with an error line", args, code, stderr, cli.ExitUsage)
		}
	}
}

// Every verb users run has --help with examples.
func TestEveryVerbHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() || sub.Name() == "help" {
				continue
			}
			if sub.Example == "" {
				t.Errorf("%s has no examples in its --help", sub.CommandPath())
			}
			// Cobra's completion scripts per shell say in full how to load them.
			if sub.Name() != "completion" {
				walk(sub)
			}
		}
	}
	walk(cli.NewCommand(genericiooptions.NewTestIOStreamsDiscard()))
}

// cache shows the nodes' NodeImageCaches, and how much of a task file's
// images each node has.
func TestCache(t *testing.T) {
	code, _, stderr := execute("cache")
	if code != cli.ExitFailure || !strings.Contains(stderr, "is asrl-prepull-agent running?") {
		t.Fatalf("cache without NodeImageCaches: exit %d, %s", code, stderr)
	}
	clients, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	imgs := testcri.SWEBench(1)
	for i, held := range [][]nodecache.RuntimeImage{imgs, nil} {
		nic := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kwok-node-%d", i)}}
		nodecache.Observe(nic, nodecache.Snapshot{Images: held}, time.Now(), nodecache.MaxObjectBytes)
		if err := clients.Client.Create(context.Background(), nic); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = clients.Client.Delete(context.Background(), nic) })
	}

	code, out, stderr := execute("cache")
	if code != cli.ExitOK || !strings.Contains(out, "kwok-node-0  1 ") || !strings.Contains(out, "kwok-node-1  0 ") {
		t.Fatalf("cache: exit %d\n%s%s", code, out, stderr)
	}

	// An image no node has, in a registry on loopback (go-containerregistry's,
	// in memory).
	reg := httptest.NewServer(ggcrregistry.New())
	defer reg.Close()
	onNoNode := strings.TrimPrefix(reg.URL, "http://") + "/swebench/django-9:latest"
	pushed, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(onNoNode)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, pushed); err != nil {
		t.Fatal(err)
	}
	m, err := pushed.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	pushedSize := int64(0)
	for _, l := range m.Layers {
		pushedSize += l.Size
	}

	taskFile := filepath.Join(t.TempDir(), "tasks.jsonl")
	rows := fmt.Sprintf("{\"id\": \"a\", \"image\": %q}\n{\"id\": \"b\", \"image\": %q}\n", imgs[0].RepoTags[0], onNoNode)
	if err := os.WriteFile(taskFile, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = execute("cache", "--images", taskFile, "-o", "json")
	var presences []nodecache.Presence
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &presences) != nil || len(presences) != 2 {
		t.Fatalf("cache --images -o json: exit %d\n%s%s", code, out, stderr)
	}
	if p := presences[0]; !p.Known || p.Nodes[0].Node != "kwok-node-0" || p.Nodes[0].MissingBytes != 0 || p.Nodes[1].PresentBytes != 0 {
		t.Errorf("the image on kwok-node-0: %+v", p)
	}
	if p := presences[1]; !p.Known || p.SizeBytes != pushedSize || p.Nodes[0].MissingBytes != pushedSize {
		t.Errorf("an image no node has, read from its registry (%d bytes): %+v", pushedSize, p)
	}
	code, out, _ = execute("cache", "--images", taskFile, "--registry=false")
	if code != cli.ExitOK || !strings.Contains(out, "1 image is on no node and was not read from its registry") {
		t.Errorf("cache --registry=false: exit %d\n%s", code, out)
	}

	code, _, stderr = execute("cache", "--images", filepath.Join(t.TempDir(), "missing.jsonl"))
	if code != cli.ExitUsage || !strings.Contains(stderr, "missing.jsonl") {
		t.Errorf("cache --images of a missing file: exit %d, %s", code, stderr)
	}
}

// prepull checks its input before it creates anything.
func TestPrepullRejectsBadInput(t *testing.T) {
	ns := cluster.NewNamespace(t)
	images := filepath.Join(t.TempDir(), "images.txt")
	if err := os.WriteFile(images, []byte("busybox:1.36\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{}, "give a task file with --tasks FILE"},
		{[]string{"--tasks", images, "--parallelism", "0"}, "--parallelism 0: must be 1 to 16"},
		{[]string{"--tasks", images, "--prepull-high-water", "120"}, "--prepull-high-water 120: must be a percentage"},
		// The old spelling, deprecated, is checked as the flag it stands for.
		{[]string{"--tasks", images, "--high-water", "120"}, "--prepull-high-water 120: must be a percentage"},
		{[]string{"--tasks", images, "-l", "pool in (a,b)"}, "PrepullJobs select nodes by key=value pairs"},
		{[]string{"--tasks", images, "--ttl", "1.5s"}, "--ttl 1.5s: must be whole seconds"},
		{[]string{"--tasks", filepath.Join(t.TempDir(), "none.txt")}, "none.txt"},
		{[]string{"--tasks", images, "--run-id", "Not_A_Label"}, `--run-id "Not_A_Label"`},
		{[]string{"--delete"}, "--delete deletes the PrepullJobs of a run: give --run-id ID"},
		{[]string{"--delete", "--run-id", "r", "--tasks", images}, "and no --tasks or --wait"},
	} {
		code, _, stderr := execute(append([]string{"prepull", "-n", ns}, tt.args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, tt.says) {
			t.Errorf("prepull %v: exit %d, %s; want a usage error saying %q", tt.args, code, stderr, tt.says)
		}
	}
	// --wait with no node running an agent creates nothing.
	code, _, stderr := execute("prepull", "-n", ns, "--tasks", images, "-l", "pool=none", "--wait")
	if code != cli.ExitFailure || !strings.Contains(stderr, "nothing would pull") {
		t.Errorf("prepull --wait onto no agent: exit %d, %s", code, stderr)
	}
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	jobs := &v1alpha1.PrepullJobList{}
	if err := clients.Client.List(context.Background(), jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("a rejected prepull left %d PrepullJobs (%v)", len(jobs.Items), err)
	}
	// A good one: --ttl is the job's ttlSecondsAfterFinished, and the
	// images are named in full, as the PrepullJob admission policy
	// judges them.
	if code, out, stderr := execute("prepull", "-n", ns, "--tasks", images, "--name", "with-ttl", "--ttl", "1h"); code != 0 || out != "with-ttl\n" {
		t.Fatalf("prepull --ttl 1h: exit %d, %q %s", code, out, stderr)
	}
	job := &v1alpha1.PrepullJob{}
	if err := clients.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "with-ttl"}, job); err != nil ||
		job.Spec.TTLSecondsAfterFinished == nil || *job.Spec.TTLSecondsAfterFinished != 3600 ||
		!slices.Equal(job.Spec.Images, []string{"docker.io/library/busybox:1.36"}) {
		t.Errorf("prepull --ttl 1h of busybox:1.36 made %+v (%v), want ttlSecondsAfterFinished 3600 and the image in full", job.Spec, err)
	}
	// A mirrored run's task file: prepull reads it as run does, the same
	// fields and the same rewrite, so it pulls the images the run will use.
	rows := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(rows, []byte(`{"task": "a", "img": "docker.io/library/busybox:1.36"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := execute("prepull", "-n", ns, "--tasks", rows, "--id-field", "task", "--image-field", "img",
		"--rewrite", "docker.io=mirror.example/hub", "--name", "mirrored")
	if code != 0 || out != "mirrored\n" {
		t.Fatalf("prepull of a mirrored task file: exit %d, %q %s", code, out, stderr)
	}
	if err := clients.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "mirrored"}, job); err != nil ||
		!slices.Equal(job.Spec.Images, []string{"mirror.example/hub/library/busybox:1.36"}) {
		t.Errorf("prepull of a mirrored task file pulls %v (%v), want the mirror's image", job.Spec.Images, err)
	}
	// A run's pre-pull is labelled as the run's objects are, listed with
	// what the run left, and deleted by --delete alone of the jobs here.
	if code, out, stderr := execute("prepull", "-n", ns, "--tasks", images, "--run-id", "rl-step"); code != 0 || !strings.HasPrefix(out, "rl-step-prepull-") {
		t.Fatalf("prepull --run-id rl-step: exit %d, %q %s", code, out, stderr)
	}
	if code, _, stderr := execute("teardown", "-n", ns, "--run-id", "rl-step", "--dry-run"); code != cli.ExitFailure ||
		!strings.Contains(stderr, "run rl-step left 1 objects") || !strings.Contains(stderr, ": PrepullJob/rl-step-prepull-") {
		t.Errorf("teardown --dry-run of run rl-step: exit %d, %s; want its PrepullJob listed", code, stderr)
	}
	if code, out, stderr := execute("prepull", "-n", ns, "--delete", "--run-id", "rl-step"); code != 0 || !strings.HasPrefix(out, "prepulljob.sandbox-fleet.io/rl-step-prepull-") {
		t.Errorf("prepull --delete --run-id rl-step: exit %d, %q %s", code, out, stderr)
	}
	jobs = &v1alpha1.PrepullJobList{}
	if err := clients.Client.List(context.Background(), jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 2 {
		t.Errorf("after deleting run rl-step's pre-pull, %d PrepullJobs are left (%v), want the other two", len(jobs.Items), err)
	}
	if code, _, stderr := execute("prepull", "-n", ns, "--delete", "--run-id", "rl-step"); code != 0 || !strings.Contains(stderr, "run rl-step has no PrepullJobs") {
		t.Errorf("prepull --delete of a run with none: exit %d, %s", code, stderr)
	}
	if code, out, stderr := execute("teardown", "-n", ns, "--run-id", "rl-step", "--dry-run"); code != 0 || !strings.Contains(out, "verified: nothing of run rl-step is left") {
		t.Errorf("teardown --dry-run of a run with nothing left: exit %d, %q %s", code, out, stderr)
	}
}
