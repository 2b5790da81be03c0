package pywheel

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestTags(t *testing.T) {
	for _, tt := range []struct {
		goos, goarch string
		want         []string
	}{
		{"linux", "amd64", []string{"py3-none-manylinux_2_17_x86_64", "py3-none-manylinux2014_x86_64", "py3-none-musllinux_1_1_x86_64"}},
		{"linux", "arm64", []string{"py3-none-manylinux_2_17_aarch64", "py3-none-manylinux2014_aarch64", "py3-none-musllinux_1_1_aarch64"}},
		{"darwin", "amd64", []string{"py3-none-macosx_10_13_x86_64"}},
		{"darwin", "arm64", []string{"py3-none-macosx_11_0_arm64"}},
		{"windows", "amd64", nil},
		{"linux", "riscv64", nil},
	} {
		got, err := Tags(tt.goos, tt.goarch)
		if !reflect.DeepEqual(got, tt.want) || (err == nil) != (tt.want != nil) {
			t.Errorf("Tags(%s, %s) = %v, %v; want %v", tt.goos, tt.goarch, got, err, tt.want)
		}
	}
	if got := fileTag([]string{"py3-none-a", "py3-none-b"}); got != "py3-none-a.b" {
		t.Errorf("fileTag = %s", got)
	}
}

// A platform wheel holds the pure wheel's files, the binary (executable),
// a WHEEL with the platform's tags and not purelib, and a RECORD whose
// every hash and size is right.
func TestPlatform(t *testing.T) {
	dir := t.TempDir()
	pure := filepath.Join(dir, "sandbox_fleet-0.1.0-py3-none-any.whl")
	f, err := os.Create(pure)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for name, text := range map[string]string{
		"sandbox_fleet/__init__.py":                   "x = 1\n",
		"sandbox_fleet-0.1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"sandbox_fleet-0.1.0.dist-info/METADATA":      "Name: sandbox-fleet\n",
		"sandbox_fleet-0.1.0.dist-info/RECORD":        "stale\n",
		"sandbox_fleet-0.1.0.dist-info/top_level.txt": "sandbox_fleet\n",
	} {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(w, text)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	binary := filepath.Join(dir, "kubectl-sandbox_fleet")
	if err := os.WriteFile(binary, []byte("\x7fELF binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	path, err := Platform(pure, binary, "linux", "amd64", out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sandbox_fleet-0.1.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64.whl"; filepath.Base(path) != want {
		t.Errorf("wheel %s, want %s", filepath.Base(path), want)
	}
	r, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	files := map[string]string{}
	modes := map[string]os.FileMode{}
	for _, f := range r.File {
		data, err := read(f)
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name], modes[f.Name] = string(data), f.Mode()
	}
	if files[Binary] != "\x7fELF binary" || modes[Binary]&0o111 == 0 {
		t.Errorf("the binary: %q, mode %v", files[Binary], modes[Binary])
	}
	wheel := files["sandbox_fleet-0.1.0.dist-info/WHEEL"]
	if !strings.Contains(wheel, "Root-Is-Purelib: false\n") || strings.Contains(wheel, "py3-none-any") ||
		!strings.Contains(wheel, "Tag: py3-none-manylinux2014_x86_64\n") || !strings.Contains(wheel, "Generator: setuptools\n") {
		t.Errorf("WHEEL:\n%s", wheel)
	}
	lines := strings.Split(strings.TrimSpace(files["sandbox_fleet-0.1.0.dist-info/RECORD"]), "\n")
	if len(lines) != len(files) {
		t.Errorf("RECORD has %d lines for %d files:\n%s", len(lines), len(files), strings.Join(lines, "\n"))
	}
	for _, line := range lines {
		parts := strings.Split(line, ",")
		name := parts[0]
		if strings.HasSuffix(name, "RECORD") {
			if parts[1] != "" {
				t.Errorf("RECORD lists its own hash: %s", line)
			}
			continue
		}
		sum := sha256.Sum256([]byte(files[name]))
		if want := fmt.Sprintf("%s,sha256=%s,%d", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name])); line != want {
			t.Errorf("RECORD line %q, want %q", line, want)
		}
	}
}
