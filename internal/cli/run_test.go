package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/results"
)

// write writes files into a new directory and returns its path.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// skewedTasks is 40 tasks over 8 images as JSONL.
func skewedTasks() string {
	var b strings.Builder
	for i, n := range []int{12, 8, 6, 4, 4, 2, 2, 2} {
		for j := range n {
			fmt.Fprintf(&b, `{"id": "img%d-task%d", "image": "example.com/swe/img-%d:v1"}`+"\n", i, j, i)
		}
	}
	return b.String()
}

// assertNothingIn fails unless the namespace holds no object of any run
// and no Sandbox.
func assertNothingIn(t *testing.T, ns string) {
	t.Helper()
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inv, err := inventory.List(ctx, clients.Client, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	runs := inv.Runs().Items
	sandboxes := &sandboxv1beta1.SandboxList{}
	if err := clients.Client.List(ctx, sandboxes, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs) > 0 || len(sandboxes.Items) > 0 {
		t.Errorf("namespace %s holds runs %+v and %d sandboxes", ns, runs, len(sandboxes.Items))
	}
}

// A pipelined run of the skewed batch with no work does every task once,
// reports it, writes a result line per task, leaves nothing, and a rerun
// with the same results file does nothing again.
func TestRunAndResume(t *testing.T) {
	ns := cluster.NewNamespace(t)
	dir := write(t, map[string]string{"tasks.jsonl": skewedTasks()})
	resultsFile := filepath.Join(dir, "results.jsonl")
	args := []string{"run", "-n", ns, "--tasks", filepath.Join(dir, "tasks.jsonl"), "--process", "none",
		"--strategy", "pipelined", "--max-concurrent", "8", "--max-warmpool-size", "4",
		"--results", resultsFile, "--report", filepath.Join(dir, "report.json"), "-o", "json"}
	code, out, stderr := execute(args...)
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.TasksOK != 40 || rep.Strategy != "pipelined" || rep.Environment == nil || rep.SandboxesPeak < 1 {
		t.Errorf("report on stdout: %v %+v", err, rep)
	}
	if strings.ContainsAny(stderr, "\r\033") {
		t.Errorf("stderr is not a terminal but has control characters: %q", stderr)
	}
	got := mustRead(t, resultsFile)
	seen := map[string]bool{}
	for _, r := range got {
		if !r.OK || seen[r.ID] || r.Sandbox == "" || r.Phases["claim"] <= 0 {
			t.Errorf("result %+v: want one successful result per task", r)
		}
		seen[r.ID] = true
	}
	if len(seen) != 40 {
		t.Errorf("%d tasks have results, want 40", len(seen))
	}
	assertNothingIn(t, ns)

	code, out, stderr = execute(args...)
	if code != cli.ExitOK {
		t.Fatalf("rerun: exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.TasksOK+rep.TasksErr != 0 || rep.Claims != 0 {
		t.Errorf("rerun report %+v: want no task done again", rep)
	}
	if !strings.Contains(stderr, "resuming, 0 of 40 tasks left") {
		t.Errorf("rerun stderr does not say no task is left:\n%s", stderr)
	}
	if n := len(mustRead(t, resultsFile)); n != 40 {
		t.Errorf("results file has %d lines after the rerun, want 40", n)
	}

	// A run stopped after 30 results does the 10 others, and says so.
	b, err := os.ReadFile(resultsFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	if err := os.WriteFile(resultsFile, []byte(strings.Join(lines[:30], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	// Low client limits hold the requests back, and the report says so.
	code, out, stderr = execute(append(args, "--kube-api-qps", "10", "--kube-api-burst", "1")...)
	if code != cli.ExitOK {
		t.Fatalf("resumed run: exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.TasksOK != 10 {
		t.Errorf("resumed run report %+v: want the 10 tasks left done", rep)
	}
	if rep.Throttled == nil || rep.Throttled.Requests == 0 {
		t.Errorf("a run at 10 requests a second reports no client-side throttling: %+v", rep.Throttled)
	}
	if !strings.Contains(stderr, "resuming, 10 of 40 tasks left") {
		t.Errorf("resumed run stderr does not count the tasks left:\n%s", stderr)
	}
}

// Bad task files, configurations and flags are each rejected with exit 2,
// a message naming the file and line where there is one, and nothing
// created in the cluster.
func TestRunBadInput(t *testing.T) {
	ns := cluster.NewNamespace(t)
	good := `{"id": "a", "image": "busybox:1.36", "repo": "r"}` + "\n"
	cases := []struct {
		name  string
		files map[string]string
		args  []string
		want  string
	}{
		{"malformed JSON", map[string]string{"t.jsonl": good + `{"id": "b", "image": ` + "\n"}, nil, "t.jsonl:2: invalid JSON"},
		{"duplicate id", map[string]string{"t.jsonl": good + good}, nil, `t.jsonl:2: duplicate task id "a"`},
		{"no image", map[string]string{"t.jsonl": `{"id": "a"}`}, nil, `t.jsonl:1: task "a": no image`},
		{"no id", map[string]string{"t.jsonl": `{"image": "busybox"}`}, nil, "t.jsonl:1: no task id"},
		{"invalid image", map[string]string{"t.jsonl": `{"id": "a", "image": "Busybox:UPPER:case"}`}, nil, "t.jsonl:1: task \"a\": invalid image reference"},
		{"id not a label value", map[string]string{"t.jsonl": `{"id": "org/task", "image": "busybox"}`}, nil, "t.jsonl:1: task id \"org/task\" cannot be a Kubernetes label value"},
		{"id field missing", map[string]string{"t.jsonl": good}, []string{"--id-field", "task"}, `t.jsonl:1: no task id: the row has no string or number field "task"`},
		{"bad line in an image list", map[string]string{"t.jsonl": "busybox:1.36\nnot a valid image\n"}, nil, "t.jsonl:2:"},
		{"no tasks in the file", map[string]string{"t.jsonl": "\n"}, nil, "no tasks in"},
		{"an id in two files", map[string]string{"t.jsonl": good, "u.jsonl": "\n" + good}, []string{"--tasks", "u.jsonl"}, "u.jsonl:2: duplicate task id"},
		{"unknown placeholder", map[string]string{"t.jsonl": good}, []string{"--", "echo", "{nope}"}, "t.jsonl:1: unknown placeholder {nope}"},
		{"prepull high-water out of range", map[string]string{"t.jsonl": good}, []string{"--prepull", "--prepull-high-water", "0"}, "--prepull-high-water 0: must be a percentage"},
		{"heartbeat under a second", map[string]string{"t.jsonl": good}, []string{"--heartbeat", "0s"}, "--heartbeat 0s: must be at least 1s"},
		{"missing metadata", map[string]string{"t.jsonl": good}, []string{"--", "echo", "{metadata.commit}"}, `t.jsonl:1: task a has no metadata field "commit"`},
		{"unknown config field", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nmaxConcurent: 4\n"}, nil, "f.yaml:3:"},
		{"config value of the wrong type", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\n\nmaxConcurrent: many\n"}, nil, "f.yaml:4:"},
		{"bad quantity", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\ntemplate:\n  resources:\n    requests:\n      cpu: lots\n"}, nil, "f.yaml:6:"},
		{"negative pool cap", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nmaxWarmPoolSize: -2\n"}, nil, "f.yaml:3: maxWarmPoolSize"},
		{"unknown strategy in the config", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nstrategy: eager\n"}, nil, "f.yaml:3: strategy: unknown strategy \"eager\""},
		{"wrong apiVersion", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: v1\nkind: FleetConfig\n"}, nil, "f.yaml:1: apiVersion"},
		{"duplicate cluster", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nclusters:\n- name: a\n- name: a\n"}, nil, "f.yaml:5: clusters[1].name: duplicate cluster name"},
		{"bad pull policy", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\ntemplate:\n  imagePullPolicy: Sometimes\n"}, nil, "f.yaml:4: template.imagePullPolicy"},
		{"headroom out of range", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\ndisk:\n  headroom: 1.5\n"}, nil, "f.yaml:4: disk.headroom"},
		{"YAML syntax", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nmaxConcurrent: 1\n  strategy: naive\n"}, nil, "f.yaml:4: mapping values are not allowed"},
		{"bad rewrite in the config", map[string]string{"t.jsonl": good, "f.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nrewrite:\n- from: docker.io\n  to: ''\n"}, nil, "f.yaml:4: rewrite[0]"},
		{"garbled results file", map[string]string{"t.jsonl": good, "r.jsonl": "{\"id\": \"a\", \"exitCode\": 0}\nhello\n"}, []string{"--results", "r.jsonl"}, "r.jsonl:2: not a result line"},
		{"unknown strategy flag", map[string]string{"t.jsonl": good}, []string{"--strategy", "eager"}, `--strategy eager: unknown strategy "eager": use one of none, naive, sliding, pipelined`},
		{"local without a command", map[string]string{"t.jsonl": good}, []string{"--process", "local"}, "--process local needs a command"},
		{"nothing to run", map[string]string{"t.jsonl": good}, []string{"--process", "exec"}, "nothing to run"},
		{"bad rewrite flag", map[string]string{"t.jsonl": good}, []string{"--rewrite", "docker.io"}, `--rewrite "docker.io"`},
		{"bad run id", map[string]string{"t.jsonl": good}, []string{"--run-id", "Run_1"}, `--run-id "Run_1"`},
		{"no task file", nil, []string{"--tasks", "missing.jsonl"}, "missing.jsonl"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			dir := write(t, tt.files)
			args := []string{"run", "-n", ns}
			if !slices.Contains(tt.args, "--process") && !slices.Contains(tt.args, "--") {
				args = append(args, "--process", "none")
			}
			if _, ok := tt.files["t.jsonl"]; ok {
				args = append(args, "--tasks", filepath.Join(dir, "t.jsonl"))
			}
			if _, ok := tt.files["f.yaml"]; ok {
				args = append(args, "-f", filepath.Join(dir, "f.yaml"))
			}
			for _, a := range tt.args {
				if strings.HasSuffix(a, ".jsonl") {
					a = filepath.Join(dir, a)
				}
				args = append(args, a)
			}
			code, _, stderr := execute(args...)
			if code != cli.ExitUsage || !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, cli.ExitUsage, tt.want)
			}
		})
	}
	assertNothingIn(t, ns)
}

// buildPlugin builds the kubectl plugin binary for tests that signal it.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-sandbox_fleet")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sandbox-fleet/sandbox-fleet/cmd/kubectl-sandbox_fleet").CombinedOutput()
	if err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	return bin
}

// startHungRun starts the plugin on a run whose tasks hang in a local
// command, and returns once one task holds a sandbox.
func startHungRun(t *testing.T, bin, ns, runID string, flags ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	dir := write(t, map[string]string{"tasks.jsonl": skewedTasks()})
	marker := filepath.Join(dir, "claimed")
	args := append([]string{"--kubeconfig", cluster.Kubeconfig(), "run", "-n", ns, "--run-id", runID,
		"--tasks", filepath.Join(dir, "tasks.jsonl"), "--max-concurrent", "8", "--process", "local"}, flags...)
	cmd := exec.Command(bin, append(args, "--", "sh", "-c", "touch "+marker+"; exec sleep 600")...)
	// Its own process group, so that killing it takes its children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(marker); err == nil {
			return cmd, &stderr
		}
		if time.Now().After(deadline) {
			t.Fatalf("no task claimed a sandbox in 2 minutes:\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// SIGINT mid-run tears the run down before the plugin exits, and the
// plugin says it was interrupted — under every strategy, also those that
// unwarm a window when its tasks end.
func TestRunInterrupted(t *testing.T) {
	bin := buildPlugin(t)
	for _, strategy := range []string{"naive", "sliding", "pipelined"} {
		t.Run(strategy, func(t *testing.T) {
			ns := cluster.NewNamespace(t)
			cmd, stderr := startHungRun(t, bin, ns, "interrupted", "--strategy", strategy)
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != cli.ExitFailure {
				t.Errorf("exit %d (%v), want %d\n%s", code, err, cli.ExitFailure, stderr)
			}
			if !strings.Contains(stderr.String(), "interrupted by interrupt") || strings.Contains(stderr.String(), "context canceled") {
				t.Errorf("stderr does not say plainly that the run was interrupted:\n%s", stderr)
			}
			assertNothingIn(t, ns)
		})
	}
}

// A run killed outright leaves its objects; reap --run-id removes them.
func TestRunKilledThenReaped(t *testing.T) {
	bin := buildPlugin(t)
	ns := cluster.NewNamespace(t)
	// A heartbeat far longer than the checks before the first reap take on
	// a loaded machine; its expiry is then made by backdating the Lease.
	cmd, _ := startHungRun(t, bin, ns, "killed", "--heartbeat", "10m")
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.List(context.Background(), clients.Client, ns, "killed")
	if err != nil || len(inv.Runs().Items) != 1 {
		t.Fatalf("after SIGKILL: %+v (%v), want the killed run's objects", inv, err)
	}
	checkGetAndDescribe(t, ns, "killed")
	// Until its heartbeat expires, the run may be alive for all reap knows.
	code, out, stderr := execute("reap", "-n", ns, "--orphans", "--min-age", "0", "--dry-run")
	if code != cli.ExitOK || strings.Contains(out, "killed") {
		t.Errorf("reap --orphans took a run whose heartbeat is still valid: exit %d\n%s%s", code, out, stderr)
	}
	leases := clients.Kube.CoordinationV1().Leases(ns)
	lease, err := leases.Get(context.Background(), fleet.HeartbeatLease("killed"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: lease.Spec.RenewTime.Add(-11 * time.Minute)}
	if _, err := leases.Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = execute("reap", "-n", ns, "--orphans", "--dry-run")
	if code != cli.ExitOK || !strings.Contains(out, "killed") || !strings.Contains(out, "would reap") {
		t.Errorf("reap --orphans --dry-run after the heartbeat expired: exit %d\n%s%s", code, out, stderr)
	}
	// -A finds it from another namespace, and reaps it in its own.
	code, out, stderr = execute("reap", "-n", "default", "-A", "--run-id", "killed")
	if code != cli.ExitOK || !regexp.MustCompile(ns+`\s+killed\s.*reaped`).MatchString(out) {
		t.Errorf("reap -A --run-id: exit %d\n%s%s", code, out, stderr)
	}
	assertNothingIn(t, ns)
	code, out, stderr = execute("teardown", "-n", ns, "--run-id", "killed", "--verify")
	if code != cli.ExitOK || !strings.Contains(out, "verified: nothing of run killed is left") {
		t.Errorf("teardown --verify: exit %d\n%s%s", code, out, stderr)
	}
}

func mustRead(t *testing.T, path string) []fleet.Result {
	t.Helper()
	rs, err := results.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
