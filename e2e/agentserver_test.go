package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testlog"
)

// agentServerConfig runs a stand-in of an agent server in each sandbox: it
// starts serving its health path only 8 s after the container starts, as a
// server loading a model or a framework would.
const agentServerConfig = `apiVersion: sandbox-fleet.io/v1alpha1
kind: FleetConfig
template:
  agentServer:
    command: [sh, -c, "sleep 8; mkdir -p /tmp/www && echo ok >/tmp/www/health && cd /tmp/www && exec python3 -m http.server 8000"]
    sessionKeySecret: agent-key
`

// The agent-server template's sandbox is Ready — claimable — only once
// its server answers on the health path: the task's first request, the
// moment it is handed the sandbox, finds the server up, and the session
// key from the Secret in the server's environment.
func TestAgentServerIsReadyWhenItAnswers(t *testing.T) {
	ns := newNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kubeClient(t).CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-key"},
		StringData: map[string]string{"session-key": "s3cret"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config, tasks := filepath.Join(dir, "fleet.yaml"), filepath.Join(dir, "tasks.txt")
	if err := os.WriteFile(config, []byte(agentServerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tasks, []byte(testimages.Problem(1)+"\n"+testimages.Problem(1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const firstRequest = `import os, sys, urllib.request
r = urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=5)
print(r.status, os.environ.get("SESSION_API_KEY"))
sys.exit(0 if r.status == 200 and os.environ.get("SESSION_API_KEY") == "s3cret" else 5)`
	resultsFile := filepath.Join(dir, "results.jsonl")
	log := testlog.Klog(t)
	code, out, stderr := plugin("run", "-n", ns, "-f", config, "--tasks", tasks, "--max-concurrent", "2",
		"--results", resultsFile, "--", "python3", "-c", firstRequest)
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s\n%s%s", code, out, stderr, log.String())
	}
	rs := mustRead(t, resultsFile)
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	for _, r := range rs {
		if !r.OK || strings.TrimSpace(r.Stdout) != "200 s3cret" {
			t.Errorf("task %s: ok %v, stdout %q, stderr %q: want the server up and keyed at the first request", r.ID, r.OK, r.Stdout, r.Stderr)
		}
	}
}
