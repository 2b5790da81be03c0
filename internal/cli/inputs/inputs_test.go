package inputs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Flags set fields; the configuration judges them by its own rules, and a
// refusal names the flag that set the value.
func TestFlagsOverrideTheConfiguration(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(config.Fleet) bool
		err   string
	}{
		{[]string{"--strategy", "sliding", "--epochs", "3", "--ready-timeout", "2m", "--fail-fast=false", "--recycle"},
			func(c config.Fleet) bool {
				return c.Strategy == "sliding" && c.Epochs == 3 && c.ReadyTimeout.Duration == 2*time.Minute && !*c.FailFast && c.Recycle.Enabled
			}, ""},
		{nil, func(c config.Fleet) bool { return c.Epochs == config.Default().Epochs && *c.FailFast }, ""},
		{[]string{"--concurrency", "0", "--max-live-sandboxes", "0"}, func(c config.Fleet) bool { return c.Concurrency == 0 }, ""},
		{[]string{"--strategy", "eager"}, nil, `--strategy eager: unknown strategy "eager": use one of none, naive, sliding, pipelined`},
		{[]string{"--max-warmpool-size", "0"}, nil, "--max-warmpool-size 0: must be at least 1, got 0"},
		{[]string{"--ready-timeout", "0s"}, nil, "--ready-timeout 0s: must be positive"},
		{[]string{"--claim-pacing", "later"}, nil, `--claim-pacing later: unknown claim pacing "later": use one of none, warm`},
		{[]string{"--overcommit-factor", "0.5"}, nil, "--overcommit-factor 0.5: must be at least 1 (or 0 to turn the breaker off)"},
		{[]string{"--max-reuses", "-1", "--window-size", "-2"}, nil, "--window-size -2: must not be negative"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var f Flags
			f.TasksOptional = true
			fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
			f.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, _, err := f.Load(fs, nil)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) || !usage.Is(err) {
					t.Errorf("Load = %v, want a usage error containing %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case !tc.check(cfg):
				t.Errorf("the flags did not set the configuration: %+v", cfg)
			}
		})
	}
}

// Help states the defaults the configuration has.
func TestHelpShowsTheDefaults(t *testing.T) {
	var f Flags
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	f.AddFlags(fs)
	def := config.Default()
	for flag, want := range map[string]string{
		"ready-timeout":     "(default " + def.ReadyTimeout.Duration.String() + ")",
		"claim-grace":       "(default " + def.ClaimGrace.Duration.String() + ")",
		"max-warmpool-size": "(default 8)",
		"strategy":          "(default " + def.Strategy + ")",
	} {
		if usage := fs.Lookup(flag).Usage; !strings.Contains(usage, want) {
			t.Errorf("--%s: %q does not say %q", flag, usage, want)
		}
	}
}

// The prepull high-water mark has one name and one check in every verb;
// prepull's old --high-water still sets it.
func TestPrepullHighWater(t *testing.T) {
	for _, args := range [][]string{{"--prepull-high-water", "70"}, {"--high-water", "70"}} {
		fs := pflag.NewFlagSet("prepull", pflag.ContinueOnError)
		var v int32
		AddPrepullHighWater(fs, &v, "high-water")
		if err := fs.Parse(args); err != nil || v != 70 {
			t.Errorf("%v: %d (%v), want 70", args, v, err)
		}
	}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	var v int32
	AddPrepullHighWater(fs, &v)
	if err := fs.Parse(nil); err != nil || v != nodecache.DefaultHighWaterPercent {
		t.Errorf("the default: %d (%v), want %d", v, err, nodecache.DefaultHighWaterPercent)
	}
	for _, bad := range []int32{0, 101, -5} {
		if err := CheckPrepullHighWater(bad); err == nil || !strings.HasPrefix(err.Error(), "--prepull-high-water ") || !usage.Is(err) {
			t.Errorf("CheckPrepullHighWater(%d) = %v, want a usage error naming --prepull-high-water", bad, err)
		}
	}
	if err := CheckPrepullHighWater(80); err != nil {
		t.Errorf("CheckPrepullHighWater(80) = %v", err)
	}
}

// Each flag default the verbs share is written once, here: a grep of the
// commands finds it nowhere else.
func TestSharedDefaultsWrittenOnce(t *testing.T) {
	for _, name := range []string{"fleet.DefaultHeartbeat", "nodecache.DefaultHighWaterPercent", `"prepull-high-water", `, `"high-water", `} {
		var found []string
		err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, filepath.Join("..", "inputs")) {
				return err
			}
			b, err := os.ReadFile(path)
			if err == nil && strings.Contains(string(b), name) {
				found = append(found, path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(found) > 0 {
			t.Errorf("%s is written in %v besides internal/cli/inputs: bind the flag with AddHeartbeat or AddPrepullHighWater", name, found)
		}
	}
}
