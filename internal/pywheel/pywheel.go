// Package pywheel builds the Python client's wheels: the pure one, as
// `pip install ./clients/python` builds it (setuptools, from a copy of
// the source so the build leaves nothing in the checkout), and from it a
// platform wheel per release platform that carries the plugin binary, as
// ruff and uv ship theirs, so that `pip install` is all a trainer needs.
package pywheel

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Binary is where a platform wheel carries the plugin, in the package:
// sandbox_fleet._start finds it there before PATH.
const Binary = "sandbox_fleet/_bin/kubectl-sandbox_fleet"

// Python is Debian's interpreter, which has Debian's build and setuptools;
// another python3 first on PATH (pyenv) may not.
func Python() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// BuildPure builds the pure wheel of the client at source
// (clients/python) into dir and returns its path.
func BuildPure(source, dir string) (string, error) {
	src := filepath.Join(dir, "src")
	if err := os.CopyFS(filepath.Join(src, "sandbox_fleet"), os.DirFS(filepath.Join(source, "sandbox_fleet"))); err != nil {
		return "", err
	}
	for _, name := range []string{"pyproject.toml", "README.md"} {
		data, err := os.ReadFile(filepath.Join(source, name))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			return "", err
		}
	}
	dist := filepath.Join(dir, "dist")
	cmd := exec.Command(Python(), "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %v\n%s\n(make node-deps installs python3-build and python3-setuptools)", cmd.Args, err, out)
	}
	wheels, err := filepath.Glob(filepath.Join(dist, "*.whl"))
	if err != nil || len(wheels) != 1 {
		return "", fmt.Errorf("building the wheel of %s gave %v, want one wheel (%v)", source, wheels, err)
	}
	return wheels[0], nil
}

// Tags are the wheel tags of a Go platform: the plugin is a static
// binary, so any glibc (manylinux2014, glibc 2.17) or musl Linux of the
// architecture, and macOS from the oldest the Go toolchain supports.
func Tags(goos, goarch string) ([]string, error) {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[goarch]
	switch {
	case arch == "":
		return nil, fmt.Errorf("no wheel tag for architecture %s", goarch)
	case goos == "linux":
		return []string{"py3-none-manylinux_2_17_" + arch, "py3-none-manylinux2014_" + arch, "py3-none-musllinux_1_1_" + arch}, nil
	case goos == "darwin" && goarch == "amd64":
		return []string{"py3-none-macosx_10_13_x86_64"}, nil
	case goos == "darwin" && goarch == "arm64":
		return []string{"py3-none-macosx_11_0_arm64"}, nil
	}
	return nil, fmt.Errorf("no wheel tag for %s/%s", goos, goarch)
}

// fileTag is a tag set as a wheel's file name compresses it: the shared
// python and abi tags once, the platforms joined by dots.
func fileTag(tags []string) string {
	var platforms []string
	for _, t := range tags {
		platforms = append(platforms, strings.SplitN(t, "-", 3)[2])
	}
	return "py3-none-" + strings.Join(platforms, ".")
}

// Platform writes, into outDir, the wheel of pure retagged for goos/goarch
// with binary inside at Binary, and returns its path.
func Platform(pure, binary, goos, goarch, outDir string) (string, error) {
	tags, err := Tags(goos, goarch)
	if err != nil {
		return "", err
	}
	base := filepath.Base(pure)
	if !strings.HasSuffix(base, "-py3-none-any.whl") {
		return "", fmt.Errorf("%s is not a pure wheel (py3-none-any)", base)
	}
	name := strings.TrimSuffix(base, "-py3-none-any.whl") + "-" + fileTag(tags) + ".whl"
	in, err := zip.OpenReader(pure)
	if err != nil {
		return "", err
	}
	defer in.Close()
	exe, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	w := newWriter(&buf)
	var record string
	for _, f := range in.File {
		data, err := read(f)
		if err != nil {
			return "", err
		}
		switch {
		case strings.HasSuffix(f.Name, ".dist-info/RECORD"):
			record = f.Name
			continue
		case strings.HasSuffix(f.Name, ".dist-info/WHEEL"):
			data = retag(data, tags)
		}
		if err := w.add(f.Name, data, 0o644); err != nil {
			return "", err
		}
	}
	if record == "" {
		return "", fmt.Errorf("%s has no RECORD", base)
	}
	if err := w.add(Binary, exe, 0o755); err != nil {
		return "", err
	}
	if err := w.close(record); err != nil {
		return "", err
	}
	path := filepath.Join(outDir, name)
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

func read(f *zip.File) ([]byte, error) {
	r, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// retag is a WHEEL file with tags in place of its own, and not purelib:
// the package is installed to platlib with its binary.
func retag(wheel []byte, tags []string) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(wheel))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Tag:"):
			continue
		case strings.HasPrefix(line, "Root-Is-Purelib:"):
			line = "Root-Is-Purelib: false"
		}
		if line != "" {
			out.WriteString(line + "\n")
		}
	}
	for _, t := range tags {
		out.WriteString("Tag: " + t + "\n")
	}
	return out.Bytes()
}

// writer writes a wheel: its files, in order, and last the RECORD of
// their hashes and sizes.
type writer struct {
	z      *zip.Writer
	record []string
}

func newWriter(out io.Writer) *writer { return &writer{z: zip.NewWriter(out)} }

func (w *writer) add(name string, data []byte, mode os.FileMode) error {
	h := &zip.FileHeader{Name: name, Method: zip.Deflate}
	// pip makes a file executable when its zip mode has execute bits.
	h.SetMode(mode)
	f, err := w.z.CreateHeader(h)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	w.record = append(w.record, fmt.Sprintf("%s,sha256=%s,%d", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(data)))
	return nil
}

func (w *writer) close(record string) error {
	sort.Strings(w.record)
	lines := append(w.record, record+",,")
	f, err := w.z.CreateHeader(&zip.FileHeader{Name: record, Method: zip.Deflate})
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		return err
	}
	return w.z.Close()
}
