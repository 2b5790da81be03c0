// Package runid makes and checks the ids of runs, and says how to reap
// what a run leaves: what the verbs that start runs (run, serve,
// loadtest) share, so that no verb imports another.
package runid

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
)

// FromFlag checks a --run-id, or makes a new one when it is empty.
func FromFlag(id string) (string, error) {
	if id == "" {
		return New("run"), nil
	}
	return id, Check(id)
}

// Check checks a --run-id given: a label value and a name prefix, so a
// DNS-1123 label.
func Check(id string) error {
	if msgs := validation.IsDNS1123Label(id); len(msgs) > 0 {
		return usage.Errorf("--run-id %q: %s", id, strings.Join(msgs, "; "))
	}
	return nil
}

// New makes a new id of a kind of run: the kind, the time in UTC and six
// random hex digits, e.g. run-20261203-051449-1a2b3c.
func New(kind string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return kind + "-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// ReapHint says how to remove what is left of runID, with the -f or -n
// the run was given.
func ReapHint(runID, configFile string, targets []fleet.Target) string {
	where := ""
	if configFile != "" {
		where = " -f " + configFile
	} else if len(targets) == 1 {
		where = " -n " + targets[0].Clients.Namespace
	}
	return fmt.Sprintf("remove what is left with:\n  kubectl sandbox-fleet reap --run-id %s%s", runID, where)
}
