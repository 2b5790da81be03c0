package fleet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/sandbox"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

func TestExpand(t *testing.T) {
	task := tasks.Task{ID: "django-1", Image: "mirror/django:1", OriginalImage: "docker.io/django:1", Source: "tasks.jsonl:7",
		Metadata: map[string]any{"commit": "abc", "n": 3.0, "tags": []any{"x"}}}
	h := &sandbox.Handle{Cluster: "gke-a", Namespace: "rl", Pod: "p-1", PodIP: "10.0.0.5", Sandbox: "s-1", Hostname: "s-1", Claim: "c-1", Node: "n-1"}
	for _, tt := range []struct {
		args    []string
		h       *sandbox.Handle
		want    string
		wantErr string
	}{
		{[]string{"echo", "{id}", "{image}", "{original_image}"}, h, "echo django-1 mirror/django:1 docker.io/django:1", ""},
		{[]string{"{cluster}/{namespace}/{pod}@{pod_ip}", "{sandbox}", "{claim}", "{node}", "{hostname}"}, h, "gke-a/rl/p-1@10.0.0.5 s-1 c-1 n-1 s-1", ""},
		{[]string{"git checkout {metadata.commit}", "{metadata.n}", "{metadata.tags}"}, h, `git checkout abc 3 ["x"]`, ""},
		{[]string{"sh", "-c", "echo {} {{id}}"}, h, "sh -c echo {} {django-1}", ""},
		{[]string{"{id}"}, nil, "django-1", ""},
		{[]string{"{nope}"}, h, "", "tasks.jsonl:7: unknown placeholder {nope}"},
		{[]string{"{metadata.missing}"}, h, "", `tasks.jsonl:7: task django-1 has no metadata field "missing"`},
	} {
		got, err := Expand(tt.args, task, tt.h)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("Expand(%q) error %v, want %q", tt.args, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || strings.Join(got, " ") != tt.want):
			t.Errorf("Expand(%q) = %q, %v; want %q", tt.args, got, err, tt.want)
		}
	}
}

func TestTail(t *testing.T) {
	tl := newTail(5)
	for _, s := range []string{"ab", "cd", "efg"} {
		if _, err := tl.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got := tl.String(); got != "…cdefg" {
		t.Errorf("tail = %q, want the last 5 bytes marked cut", got)
	}
	short := newTail(5)
	short.Write([]byte("ok"))
	if got := short.String(); got != "ok" {
		t.Errorf("tail = %q, want ok", got)
	}
}

// A local command that times out is killed with everything it started,
// even a grandchild that keeps its output open.
func TestLocalWorkKillsItsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	work := LocalWork([]string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := work(ctx, tasks.Task{ID: "t"}, &Sandbox{Handle: &sandbox.Handle{}})
	if took := time.Since(start); took > localWaitDelay+5*time.Second {
		t.Errorf("the timed-out command held the task for %s", took)
	}
	if err == nil {
		t.Error("a killed command reported no error")
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command's child %d outlived it", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A local command past the task's own deadline is the task's timeout: a
// TimedOut Output with exit code 124, what it wrote kept, no error.
func TestLocalWorkTaskTimeout(t *testing.T) {
	ctx := withTaskDeadline(t.Context(), time.Now().Add(300*time.Millisecond))
	out, err := LocalWork([]string{"sh", "-c", "echo started; sleep 60"})(ctx, tasks.Task{ID: "t"}, &Sandbox{Handle: &sandbox.Handle{}})
	if err != nil || !out.TimedOut || out.ExitCode != 124 || out.Stdout != "started\n" {
		t.Errorf("LocalWork past its task's deadline = %+v, %v; want timed out, 124 and the output so far", out, err)
	}
}
