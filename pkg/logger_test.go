package pkg_test

import (
	"testing"

	"github.com/go-logr/logr/funcr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	_ "github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
	_ "github.com/sandbox-fleet/sandbox-fleet/pkg/scheduler/nodecachelocality"
)

// A program that imports the library — the engine, the session, the
// scheduler plugin — sets controller-runtime's logger itself: no package
// it imports may have set it first (controller-runtime keeps the first).
func TestImportsLeaveControllerRuntimesLoggerToTheProgram(t *testing.T) {
	var lines []string
	ctrllog.SetLogger(funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	ctrllog.Log.Info("the program's own logger")
	if len(lines) != 1 {
		t.Errorf("controller-runtime logged %q through the program's logger; an imported package set its own first", lines)
	}
}
