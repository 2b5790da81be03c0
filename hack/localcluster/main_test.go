package main

import (
	"path/filepath"
	"testing"
)

// The hints name the cluster they are about: followed, they never stop
// another one.
func TestCommandNamesItsDirectory(t *testing.T) {
	other := filepath.Join(t.TempDir(), "mine")
	for _, tt := range []struct{ dir, verb, want string }{
		{defaultDir, "down", "go run ./hack/localcluster down"},
		{other, "down", "go run ./hack/localcluster -dir " + other + " down"},
		{other, "up", "go run ./hack/localcluster -dir " + other + " up"},
	} {
		if got := command(tt.dir, tt.verb); got != tt.want {
			t.Errorf("command(%q, %q) = %q, want %q", tt.dir, tt.verb, got, tt.want)
		}
	}
}
