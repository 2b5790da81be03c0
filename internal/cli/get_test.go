package cli_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
)

// roundTrip parses out into v and fails unless v printed as JSON is the
// same document.
func roundTrip(t *testing.T, what, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s: -o json does not parse: %v\n%s", what, err, out)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal([]byte(out), &a)
	_ = json.Unmarshal(again, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s: -o json does not round-trip:\n%s\nbecame\n%s", what, out, again)
	}
}

// checkGetAndDescribe checks the get and describe verbs and run id
// completion on run runID in ns, which is mid-run: pools warm, tasks
// holding claims.
func checkGetAndDescribe(t *testing.T, ns, runID string) {
	t.Helper()
	get := func(args ...string) string {
		t.Helper()
		code, out, stderr := execute(append([]string{"-n", ns}, args...)...)
		if code != cli.ExitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
		return out
	}

	var runs inventory.RunList
	roundTrip(t, "get runs", get("get", "runs", "-o", "json"), &runs)
	if len(runs.Items) != 1 || runs.Items[0].Name != runID || runs.Items[0].Status.Pools == 0 || runs.Items[0].Status.Claims == 0 {
		t.Errorf("get runs -o json: %+v, want run %s with pools and claims", runs.Items, runID)
	}
	var pools extensionsv1beta1.SandboxWarmPoolList
	roundTrip(t, "get pools", get("get", "pools", "-o", "json"), &pools)
	if len(pools.Items) != runs.Items[0].Status.Pools || pools.Kind != "SandboxWarmPoolList" || pools.Items[0].Kind != "SandboxWarmPool" {
		t.Errorf("get pools -o json: %d pools of kind %q/%q, want %d", len(pools.Items), pools.Kind, pools.Items[0].Kind, runs.Items[0].Status.Pools)
	}
	var claims extensionsv1beta1.SandboxClaimList
	roundTrip(t, "get claims", get("get", "claims", "--run-id", runID, "-o", "json"), &claims)
	if len(claims.Items) != runs.Items[0].Status.Claims {
		t.Errorf("get claims -o json: %d claims, want %d", len(claims.Items), runs.Items[0].Status.Claims)
	}

	if out := get("get", "claims", "-o", "wide"); !strings.Contains(out, runID) || !strings.Contains(out, "Ready") || !strings.Contains(out, "SANDBOX") {
		t.Errorf("get claims -o wide lacks the run, a Ready claim or the wide columns:\n%s", out)
	}
	if out := get("get", "pools", "--run-id", "no-such-run"); out != "" {
		t.Errorf("get pools of no run printed %q", out)
	}
	if out := get("describe", "run", runID); !strings.Contains(out, "Name:        "+runID) || !strings.Contains(out, "Warm Pools:\n") || !strings.Contains(out, "Claims:\n") {
		t.Errorf("describe run:\n%s", out)
	}
	if code, _, stderr := execute("-n", ns, "describe", "run", "no-such-run"); code != cli.ExitFailure || !strings.Contains(stderr, "get runs") {
		t.Errorf("describe of no run: exit %d, %q; want 1 and a hint", code, stderr)
	}
	if out := get("__complete", "describe", "run", ""); !strings.HasPrefix(out, runID+"\n") {
		t.Errorf("completing a run id gave %q, want %s first", out, runID)
	}
}
