// Command dist builds the plugin's release archives, one per platform of
// the krew manifest, and writes the manifest with their URLs and sha256
// filled in; and the Python client's wheels: the pure one, and one per
// platform carrying the plugin: `make dist VERSION=v0.2.0`.
//
//	go run ./hack/dist -version v0.2.0 -out dist [-url BASE] [-ldflags ...]
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/gobuild"
	"github.com/sandbox-fleet/sandbox-fleet/internal/pywheel"
)

const (
	plugin = "kubectl-sandbox_fleet"
	// completer is the helper kubectl runs to complete plugin arguments.
	completer = "kubectl_complete-sandbox_fleet"
	// releases is where GitHub serves a tag's archives.
	releases = "https://github.com/sandbox-fleet/sandbox-fleet/releases/download/"
)

func main() {
	o := Options{Root: "."}
	flag.StringVar(&o.Version, "version", "", "release version, vX.Y.Z")
	flag.StringVar(&o.Out, "out", "dist", "directory for the archives and sandbox-fleet.yaml")
	flag.StringVar(&o.URL, "url", "", "where the archives will be served (default: the GitHub release of -version)")
	flag.StringVar(&o.Manifest, "manifest", "plugins/krew.yaml", "krew manifest to fill in")
	flag.StringVar(&o.LDFlags, "ldflags", "", "go build -ldflags")
	flag.Parse()
	if err := Build(o); err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

// Options of a release build.
type Options struct {
	// Root is the module's directory; relative Out and Manifest are in it.
	Root                                 string
	Version, Out, URL, Manifest, LDFlags string
}

// uriLine matches a platform's archive URL in the manifest; the archive's
// name says its platform: kubectl-sandbox_fleet_<os>_<arch>.tar.gz.
var uriLine = regexp.MustCompile(`(?m)^(\s*(?:-\s+)?uri:\s*)\S*/(` + plugin + `_([a-z0-9]+)_([a-z0-9]+)\.tar\.gz)\s*$`)

// Build cross-compiles the plugin for every platform of the manifest,
// archives it with its completion helper and the license, writes the
// filled manifest to Out/sandbox-fleet.yaml, and writes the client's pure
// wheel and a platform wheel per platform, the plugin inside, to Out.
func Build(o Options) error {
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(o.Version) {
		return fmt.Errorf("-version %q: give a semantic version such as v0.2.0 (krew requires one)", o.Version)
	}
	if o.URL == "" {
		o.URL = releases + o.Version + "/"
	}
	o.Out, o.Manifest = under(o.Root, o.Out), under(o.Root, o.Manifest)
	manifest, err := os.ReadFile(o.Manifest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sandbox-fleet-dist-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	pure, err := pywheel.BuildPure(filepath.Join(o.Root, "clients", "python"), filepath.Join(tmp, "wheel"))
	if err != nil {
		return err
	}
	if err := copyFile(pure, filepath.Join(o.Out, filepath.Base(pure))); err != nil {
		return err
	}
	sums := map[string]string{}
	for _, m := range uriLine.FindAllStringSubmatch(string(manifest), -1) {
		name, goos, goarch := m[2], m[3], m[4]
		binary := filepath.Join(tmp, goos+"_"+goarch, plugin)
		if err := gobuild.Command(o.Root, plugin, binary, gobuild.Target{GOOS: goos, GOARCH: goarch, LDFlags: o.LDFlags}); err != nil {
			return fmt.Errorf("%s/%s: %w", goos, goarch, err)
		}
		sum, err := archive(o, filepath.Join(o.Out, name), binary)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", goos, goarch, err)
		}
		sums[name] = sum
		if _, err := pywheel.Platform(pure, binary, goos, goarch, o.Out); err != nil {
			return fmt.Errorf("%s/%s wheel: %w", goos, goarch, err)
		}
	}
	filled, err := Fill(manifest, o.Version, o.URL, sums)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Manifest, err)
	}
	return os.WriteFile(filepath.Join(o.Out, "sandbox-fleet.yaml"), filled, 0o644)
}

// under resolves path against root unless it is absolute.
func under(root, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(root, path)
}

// copyFile copies the file at src to dst.
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// archive writes binary (a platform's plugin), its completion helper and
// the license into a tar.gz at path and returns its sha256. Entries carry
// a fixed time, so the same build makes the same archive.
func archive(o Options, path, binary string) (string, error) {

	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		src  string
		mode int64
	}{
		{binary, 0o755},
		{filepath.Join(o.Root, "plugins", completer), 0o755},
		{filepath.Join(o.Root, "LICENSE"), 0o644},
	} {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return "", err
		}
		hdr := &tar.Header{Name: filepath.Base(f.src), Mode: f.mode, Size: int64(len(data)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", err
		}
		if _, err := tw.Write(data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

var (
	versionLine = regexp.MustCompile(`(?m)^(  version:\s*)\S+\s*$`)
	sha256Line  = regexp.MustCompile(`^(\s*(?:-\s+)?sha256:\s*)\S*\s*$`)
)

// Fill sets the manifest's version, points every platform's uri at base
// and sets the sha256 following it from sums, keyed by archive name. Every
// platform must have a sum.
func Fill(manifest []byte, version, base string, sums map[string]string) ([]byte, error) {
	if !versionLine.Match(manifest) {
		return nil, fmt.Errorf("no spec.version line")
	}
	out := versionLine.ReplaceAllString(string(manifest), "${1}"+version)
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	lines := strings.Split(out, "\n")
	pending := ""
	for i, line := range lines {
		if m := uriLine.FindStringSubmatch(line); m != nil {
			if pending != "" {
				return nil, fmt.Errorf("line %d: the platform of %s before it has no sha256", i+1, pending)
			}
			pending = m[2]
			if sums[pending] == "" {
				return nil, fmt.Errorf("line %d: no archive was built for %s", i+1, pending)
			}
			lines[i] = m[1] + base + pending
			continue
		}
		if m := sha256Line.FindStringSubmatch(line); m != nil {
			if pending == "" {
				return nil, fmt.Errorf("line %d: a sha256 before any uri", i+1)
			}
			lines[i] = m[1] + `"` + sums[pending] + `"`
			pending = ""
		}
	}
	if pending != "" {
		return nil, fmt.Errorf("the platform of %s has no sha256 line", pending)
	}
	return []byte(strings.Join(lines, "\n")), nil
}
