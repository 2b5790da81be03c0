package plan_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// 24 SWE-bench rows over 4 images, skewed 10/6/5/3.
const taskFile = "testdata/tasks.jsonl"

func execute(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	if code := cli.Execute(streams, args); code != cli.ExitOK {
		t.Fatalf("%v: exit %d\n%s%s", args, code, out.String(), errOut.String())
	}
	return out.String()
}

func TestPlanTables(t *testing.T) {
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"naive", nil},
		{"pipelined", []string{"--strategy", "pipelined", "--max-concurrent", "8", "-f", "testdata/disk.yaml"}},
		{"warnings", []string{"--warm-per-task", "--max-warmpool-size", "4", "--max-concurrent", "40", "--max-live-sandboxes", "20"}},
		{"quiet", []string{"--strategy", "sliding", "--max-concurrent", "6", "-q"}},
		{"recycled", []string{"--recycle", "--max-reuses", "3", "--max-concurrent", "8"}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			out := execute(t, append([]string{"plan", "--offline", "--tasks", taskFile}, tt.args...)...)
			golden.Assert(t, "plan-"+tt.golden, out)
		})
	}
}

// -o json is the plan run would follow, and parses back to the same plan.
func TestPlanJSONRoundTrips(t *testing.T) {
	out := execute(t, "plan", "--tasks", taskFile, "--strategy", "pipelined", "--max-concurrent", "8", "-o", "json")
	var got fleet.Plan
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-o json does not parse: %v\n%s", err, out)
	}
	again, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if string(again)+"\n" != out {
		t.Errorf("-o json does not round-trip:\n%s\nbecame\n%s", out, again)
	}

	cfg := config.Default()
	cfg.Strategy, cfg.MaxConcurrent = "pipelined", 8
	ts, err := tasks.Load([]string{taskFile}, nil, tasks.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.MarshalIndent(fleet.NewPlan(cfg, ts), "", "  ")
	if string(want) != string(again) {
		t.Errorf("-o json is not the plan the engine makes:\n%s\nwant\n%s", again, want)
	}
	if got.Peak.Pods == 0 || len(got.Windows) < 2 {
		t.Errorf("a pipelined plan of 4 images with no peak or one window: %+v", got)
	}
}

// --concurrency alone sizes the pools for that many tasks at once, as
// --max-concurrent does; it used to leave every pool at one replica.
func TestPlanSizesFromConcurrencyAlone(t *testing.T) {
	var alone, budget fleet.Plan
	for out, args := range map[*fleet.Plan][]string{&alone: {"--concurrency", "16"}, &budget: {"--max-concurrent", "16"}} {
		if err := json.Unmarshal([]byte(execute(t, append([]string{"plan", "--tasks", taskFile, "-o", "json"}, args...)...)), out); err != nil {
			t.Fatal(err)
		}
	}
	if alone.WarmFootprint != budget.WarmFootprint || alone.WarmFootprint <= len(alone.Pools) {
		t.Errorf("--concurrency 16 warms %d sandboxes over %d pools, --max-concurrent 16 warms %d: want the same, more than one a pool",
			alone.WarmFootprint, len(alone.Pools), budget.WarmFootprint)
	}
}
