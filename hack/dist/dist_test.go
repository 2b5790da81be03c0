package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
)

func TestFill(t *testing.T) {
	const manifest = `spec:
  version: v0.1.0
  platforms:
  - uri: https://example.com/v0.1.0/kubectl-sandbox_fleet_linux_amd64.tar.gz
    sha256: "0000"
    bin: kubectl-sandbox_fleet
  - uri: https://example.com/v0.1.0/kubectl-sandbox_fleet_darwin_arm64.tar.gz
    sha256: "0000"
`
	sums := map[string]string{"kubectl-sandbox_fleet_linux_amd64.tar.gz": "aa", "kubectl-sandbox_fleet_darwin_arm64.tar.gz": "bb"}
	got, err := Fill([]byte(manifest), "v0.2.0", "http://127.0.0.1:8080", sums)
	if err != nil {
		t.Fatal(err)
	}
	want := `spec:
  version: v0.2.0
  platforms:
  - uri: http://127.0.0.1:8080/kubectl-sandbox_fleet_linux_amd64.tar.gz
    sha256: "aa"
    bin: kubectl-sandbox_fleet
  - uri: http://127.0.0.1:8080/kubectl-sandbox_fleet_darwin_arm64.tar.gz
    sha256: "bb"
`
	if string(got) != want {
		t.Errorf("Fill:\n%s\nwant\n%s", got, want)
	}

	for _, bad := range []struct{ name, manifest, err string }{
		{"no version", "spec:\n  platforms: []\n", "no spec.version"},
		{"archive not built", strings.Replace(manifest, "darwin_arm64", "windows_386", 1), "no archive was built for kubectl-sandbox_fleet_windows_386.tar.gz"},
		{"sum missing", strings.Replace(manifest, "    sha256: \"0000\"\n    bin", "    bin", 1), "line 6: the platform of kubectl-sandbox_fleet_linux_amd64.tar.gz before it has no sha256"},
		{"sum before uri", "spec:\n  version: v1.0.0\n  sha256: x\n", "line 3: a sha256 before any uri"},
	} {
		if _, err := Fill([]byte(bad.manifest), "v0.2.0", "http://x/", sums); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("%s: error %v, want one saying %q", bad.name, err, bad.err)
		}
	}
}

// The release archives install with krew on every platform of the
// manifest: krew's own validator checks the filled manifest, downloads
// each archive from a server on loopback, checks its sha256, installs it
// and looks for the license. The committed manifest passes its structural
// checks too.
func TestReleaseInstallsWithKrew(t *testing.T) {
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	server := httptest.NewServer(http.FileServer(http.Dir(out)))
	defer server.Close()
	if err := Build(Options{Root: "../..", Version: "v0.1.0", Out: out, URL: server.URL, Manifest: "plugins/krew.yaml"}); err != nil {
		t.Fatal(err)
	}
	validate := func(manifest string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "validate-krew-manifest"), append([]string{"-manifest", manifest}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("validate-krew-manifest %s: %v\n%s", manifest, err, b)
		}
	}
	validate(filepath.Join(out, "sandbox-fleet.yaml"))

	committed, err := os.ReadFile("../../plugins/krew.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The validator takes the plugin's name from the file's.
	copied := filepath.Join(t.TempDir(), "sandbox-fleet.yaml")
	if err := os.WriteFile(copied, committed, 0o644); err != nil {
		t.Fatal(err)
	}
	validate(copied, "-skip-install")
}
