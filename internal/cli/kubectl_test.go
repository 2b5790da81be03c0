package cli_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// The plugin as users meet it: the built binary found on PATH by the real
// kubectl of the pinned version, which passes it its arguments, its exit
// code and, through the completion helper, shell completion.
func TestThroughKubectl(t *testing.T) {
	testbin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	plugins := filepath.Dir(buildPlugin(t))
	helper, err := os.ReadFile("../../plugins/kubectl_complete-sandbox_fleet")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "kubectl_complete-sandbox_fleet"), helper, 0o755); err != nil {
		t.Fatal(err)
	}

	// A run's object in a namespace of its own.
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &extensionsv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl", Namespace: ns, Labels: labels.ForRun("through-kubectl")}}
	tmpl.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "sandbox", Image: "docker.io/library/busybox:1.36"}}
	if err := clients.Client.Create(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}

	// The current context points nowhere; only --context test reaches the
	// cluster, so a command that works honours --context.
	kubeconfig, err := clientcmd.LoadFromFile(cluster.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	good := kubeconfig.Contexts[kubeconfig.CurrentContext].DeepCopy()
	kubeconfig.Contexts["test"] = good
	kubeconfig.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kubeconfig.Contexts["broken"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: good.AuthInfo}
	kubeconfig.CurrentContext = "broken"
	home := t.TempDir()
	path := filepath.Join(home, "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		t.Fatal(err)
	}

	kubectl := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(testbin, "kubectl"), args...)
		cmd.Env = []string{"PATH=" + plugins + ":" + testbin + ":/usr/bin:/bin", "KUBECONFIG=" + path, "HOME=" + home}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return code, out.String(), errOut.String()
	}

	if code, out, stderr := kubectl("plugin", "list"); code != 0 || !strings.Contains(out, filepath.Join(plugins, "kubectl-sandbox_fleet")) {
		t.Errorf("kubectl plugin list: exit %d, does not list the plugin:\n%s%s", code, out, stderr)
	}
	if code, out, stderr := kubectl("sandbox-fleet", "version", "--context", "test"); code != 0 || !strings.Contains(out, "Server Version: v1.36.") {
		t.Errorf("kubectl sandbox-fleet version --context test: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := kubectl("sandbox-fleet", "version"); code != 1 || !strings.HasPrefix(stderr, "error: reading the server version from https://127.0.0.1:1") {
		t.Errorf("kubectl sandbox-fleet version on the broken context: exit %d, %q; want 1 and one error line", code, stderr)
	}
	if code, out, stderr := kubectl("sandbox-fleet", "get", "runs", "-o", "name", "--context", "test", "-n", ns); code != 0 || out != "run.sandbox-fleet.io/through-kubectl\n" {
		t.Errorf("get runs -n %s: exit %d\n%s%s", ns, code, out, stderr)
	}
	if code, out, stderr := kubectl("sandbox-fleet", "get", "runs", "--context", "test"); code != 0 || out != "" || stderr != "No runs found in namespace default.\n" {
		t.Errorf("get runs without -n: exit %d, %q %q; want none in the context's namespace", code, out, stderr)
	}
	if code, _, stderr := kubectl("sandbox-fleet", "get", "things"); code != 2 || !strings.HasPrefix(stderr, "error: ") {
		t.Errorf("get things: exit %d, %q; want 2 and an error line", code, stderr)
	}
	if code, out, stderr := kubectl("__complete", "sandbox-fleet", "describe", "run", "--context", "test", "-n", ns, ""); code != 0 || !strings.HasPrefix(out, "through-kubectl\n") {
		t.Errorf("completing a run id through kubectl: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := kubectl("__complete", "sandbox-fleet", "g"); code != 0 || !strings.HasPrefix(out, "get\t") {
		t.Errorf("completing a verb through kubectl: exit %d\n%s%s", code, out, stderr)
	}
}
