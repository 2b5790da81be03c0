package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/componentimage"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
)

// kubectlOf runs the test binaries' kubectl on the cluster under test,
// failing t when it fails, and returns its output.
func kubectlOf(t *testing.T, ctx context.Context) func(args ...string) string {
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kubeconfig()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// pushPluginImage builds the plugin's image (serve's, the reaper's) as
// make image does and pushes it to the local cluster's registry under a
// tag of its own; it returns the repository and the tag, for an
// overlay's images: entry.
func pushPluginImage(t *testing.T, ctx context.Context, root string) (repository, tag string) {
	t.Helper()
	img, err := componentimage.Build(componentimage.Options{Root: root, Command: "kubectl-sandbox_fleet"})
	if err != nil {
		t.Fatal(err)
	}
	repository = local.RegistryAddr() + "/sandbox-fleet/sandbox-fleet"
	tag = "v0.0.0-e2e." + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := componentimage.Push(ctx, repository+":"+tag, img); err != nil {
		t.Fatal(err)
	}
	return repository, tag
}
