package fleet

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// A run that ends early accounts for every task: each of every epoch that
// neither reported a result nor was skipped fails, not run, for the run's
// reason, and the report counts it.
func TestNotStarted(t *testing.T) {
	f := &Fleet{cfg: config.Fleet{Epochs: 2}, rec: report.New("sliding"),
		tasks: []tasks.Task{{ID: "a", Image: "i"}, {ID: "b", Image: "i"}, {ID: "c", Image: "j"}}}
	reported := map[taskRef]bool{{1, "a"}: true}
	skip := func(epoch int, id string) bool { return epoch == 1 && id == "b" }
	err := verdict.Infrastructure(verdict.Controller, errors.New("the Agent Sandbox controller has been down for 45s"))
	rs := f.notStarted(reported, RunOptions{Skip: skip}, err)
	var got []string
	for _, r := range rs {
		got = append(got, r.ID+"@"+string(rune('0'+r.Epoch)))
		if r.OK || r.ExitCode != nil || r.Verdict != verdict.Infra || r.Reason != verdict.Controller || !strings.Contains(r.Error, "controller has been down") {
			t.Errorf("result %+v: want failed, not run, for the controller", r)
		}
	}
	if want := "c@1 a@2 b@2 c@2"; strings.Join(got, " ") != want {
		t.Errorf("not started: %s, want %s", strings.Join(got, " "), want)
	}
	if rep := f.rec.Report(0); rep.TasksErr != 4 || rep.TasksNotRun != 4 {
		t.Errorf("the report counts %d failed, %d not run; want 4 and 4", rep.TasksErr, rep.TasksNotRun)
	}
}
