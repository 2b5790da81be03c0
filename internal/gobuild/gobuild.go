// Package gobuild builds the project's commands as they ship, for the
// image and release builds and for the tests and benchmarks that run
// them: static (no cgo), -trimpath, and in the command's own module when
// it has one — asrl-scheduler links k8s.io/kubernetes, whose replace block
// the main module must not carry.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Target is what a build is for: GOOS and GOARCH (this machine's if
// empty) and -ldflags.
type Target struct {
	GOOS, GOARCH, LDFlags string
}

// Command builds cmd/name of the checkout at root into out.
func Command(root, name, out string, t Target) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	pkg, module := "./cmd/"+name, root
	if _, err := os.Stat(filepath.Join(root, "cmd", name, "go.mod")); err == nil {
		pkg, module = ".", filepath.Join(root, "cmd", name)
	}
	build := exec.Command("go", "build", "-trimpath", "-ldflags", t.LDFlags, "-o", out, pkg)
	build.Dir = module
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if t.GOOS != "" {
		build.Env = append(build.Env, "GOOS="+t.GOOS)
	}
	if t.GOARCH != "" {
		build.Env = append(build.Env, "GOARCH="+t.GOARCH)
	}
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", name, err, b)
	}
	return nil
}
