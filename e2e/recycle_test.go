package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testlog"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
)

// rolloutScript is a rollout that leaves everything behind that a
// rollout can: a commit and a branch in /testbed, untracked and ignored
// files, a file in /tmp and a process still running. Before that it
// checks that it found none of it: the sandbox is pristine, whether fresh
// or reset after another rollout. Its first argument says what else to do:
// "rollout" nothing, "config" change the repository's git configuration
// (which no reset undoes, so the reset cannot verify), "canary" change what
// the canary prints, "plain" only say hello (an image without /testbed).
const rolloutScript = `#!/bin/sh
fail() { echo "not pristine: $*"; exit 10; }
if [ "$1" = plain ]; then echo "hello from $SANDBOX_FLEET_TASK_ID"; exit 0; fi
cd /testbed || fail "no /testbed"
[ "$(git rev-parse HEAD)" = "$(git rev-parse pristine)" ] || fail "HEAD is $(git rev-parse HEAD)"
[ "$(git symbolic-ref -q HEAD)" = refs/heads/main ] || fail "HEAD is not on main"
[ -z "$(git status --porcelain --ignored)" ] || fail "status: $(git status --porcelain --ignored)"
[ "$(git for-each-ref --format='%(refname)' | tr '\n' ' ')" = "refs/heads/main refs/tags/pristine " ] || fail "refs: $(git for-each-ref)"
for f in /tmp/* /tmp/.[!.]*; do
	[ -e "$f" ] && [ "$f" != "$0" ] && fail "left in /tmp: $f"
done
n=0
for d in /proc/[0-9]*; do
	p=${d#/proc/}
	case $p in 1 | $$ | $PPID) continue ;; esac
	read -r stat <"$d/stat" 2>/dev/null || continue
	case ${stat##*") "} in Z* | X*) continue ;; esac
	n=$((n + 1))
done
[ "$n" = 0 ] || fail "$n processes left running"

# The rollout: fix the bug, commit on a branch of its own, build.
sed -i 's/a - b/a + b/' calc.py
git -c user.email=rollout@example.com -c user.name=rollout commit -q -am "rollout $SANDBOX_FLEET_TASK_ID" || exit 3
git checkout -q -b "rollout-$SANDBOX_FLEET_TASK_ID" || exit 3
python3 -m unittest -q 2>&1 || exit 4
echo notes >untracked.txt
mkdir -p build && echo object >build/calc.o
echo scratch >"/tmp/scratch-$SANDBOX_FLEET_TASK_ID"
setsid sleep 3600 </dev/null >/dev/null 2>&1 &
case $1 in
config) git config core.sandboxFleetTampered true ;;
canary) echo tainted >/etc/sandbox-fleet-canary ;;
esac
echo "rolled out $SANDBOX_FLEET_TASK_ID"
`

// recycledRun runs rows with --recycle and the rollout script, and returns
// its report, its results by task id, and its stderr.
func recycledRun(t *testing.T, rows []string, args ...string) (report.Report, map[string]fleet.Result, string) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"tasks.jsonl": strings.Join(rows, "\n") + "\n",
		"rollout.sh":  rolloutScript,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resultsFile := filepath.Join(dir, "results.jsonl")
	log := testlog.Klog(t)
	code, out, stderr := plugin(append([]string{"run", "-n", newNamespace(t), "--tasks", filepath.Join(dir, "tasks.jsonl"),
		"--script", filepath.Join(dir, "rollout.sh"), "--recycle", "--results", resultsFile, "-o", "json"},
		append(args, "--", "{metadata.mode}")...)...)
	stderr += log.String()
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	byID := map[string]fleet.Result{}
	for _, r := range mustRead(t, resultsFile) {
		byID[r.ID] = r
		if !r.OK {
			t.Errorf("task %s: %s\n%s%s", r.ID, r.Error, r.Stdout, r.Stderr)
		}
	}
	if len(byID) != len(rows) {
		t.Errorf("%d results, want %d", len(byID), len(rows))
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err == nil {
		t.Log(table.String())
	}
	return rep, byID, stderr
}

// G = 8 rollouts of 3 problems, recycled: each problem's rollouts run one
// after another on one sandbox, each finding it pristine after the last
// left a commit, a branch, untracked and ignored files, a file in /tmp
// and a running process; an image without a git work tree falls back to a
// fresh sandbox per task, said once.
func TestRecycledRollouts(t *testing.T) {
	const g = 8
	var rows []string
	for n := 1; n <= 3; n++ {
		for i := range g {
			rows = append(rows, fmt.Sprintf(`{"id": "p%d-r%d", "image": %q, "mode": "rollout"}`, n, i, testimages.Problem(n)))
		}
	}
	rows = append(rows, `{"id": "plain-1", "image": "`+testimages.Busybox+`", "mode": "plain"}`,
		`{"id": "plain-2", "image": "`+testimages.Busybox+`", "mode": "plain"}`)
	rep, byID, stderr := recycledRun(t, rows, "--max-concurrent", "6")

	for n := 1; n <= 3; n++ {
		var resets []int
		for i := range g {
			r := byID[fmt.Sprintf("p%d-r%d", n, i)]
			resets = append(resets, r.Resets)
			if r.Reused != (r.Resets > 0) || !strings.Contains(r.Stdout, "rolled out") {
				t.Errorf("task %s: reused %v after %d resets, stdout %q", r.ID, r.Reused, r.Resets, r.Stdout)
			}
		}
		slices.Sort(resets)
		if !slices.Equal(resets, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
			t.Errorf("problem %d's rollouts ran after %v resets, want one sandbox reset after each rollout: 0 to 7", n, resets)
		}
	}
	for _, id := range []string{"plain-1", "plain-2"} {
		if r := byID[id]; r.Reused || !strings.Contains(r.Stdout, "hello from "+id) {
			t.Errorf("task %s on the image without git: %+v; want a fresh sandbox", id, r)
		}
	}
	if n := strings.Count(stderr, "is not recycled"); n != 1 || !strings.Contains(stderr, `image="`+testimages.Busybox+`" reason="no directory /testbed"`) {
		t.Errorf("the image without git was said %d times, want once:\n%s", n, stderr)
	}
	// A claim per problem and one per task of the image without git.
	if rep.Claims != 3+2 || rep.TasksReused != 3*(g-1) {
		t.Errorf("%d claims and %d tasks on a reset sandbox, want 5 and %d", rep.Claims, rep.TasksReused, 3*(g-1))
	}
	if c := phaseCount(rep, "reset"); c != 3*(g-1) {
		t.Errorf("%d resets, want %d", c, 3*(g-1))
	}
}

// A reset that cannot verify (the rollout changed the repository's git
// configuration, which a reset does not put back) and a canary whose
// output changed (the rollout wrote outside the work tree) each quarantine
// the sandbox: the next rollout still runs, on a fresh one. A sandbox that
// had maxReuses resets rotates: the next rollout has a fresh one too.
func TestRecycleQuarantinesAndRotates(t *testing.T) {
	modes := []string{"rollout", "config", "rollout", "canary", "rollout", "rollout", "rollout", "rollout"}
	var rows []string
	for i, mode := range modes {
		rows = append(rows, fmt.Sprintf(`{"id": "r%d", "image": %q, "mode": %q}`, i, testimages.Problem(1), mode))
	}
	rep, byID, stderr := recycledRun(t, rows, "--max-reuses", "2", "--canary", "cat /etc/sandbox-fleet-canary 2>/dev/null; echo canary")

	// r0 fresh, r1 after a reset; r1's reset does not verify, so r2 is
	// fresh, r3 after a reset; r3's canary differs, so r4 is fresh; r5 and
	// r6 after one and two resets; r6's sandbox rotates, so r7 is fresh.
	for i, want := range []int{0, 1, 0, 1, 0, 1, 2, 0} {
		if r := byID[fmt.Sprintf("r%d", i)]; r.Resets != want {
			t.Errorf("task r%d ran after %d resets, want %d", i, r.Resets, want)
		}
	}
	if q, r := phaseCount(rep, "quarantine"), phaseCount(rep, "rotate"); q != 2 || r != 1 || rep.Claims != 4 {
		t.Errorf("%d quarantines, %d rotations and %d claims, want 2, 1 and 4", q, r, rep.Claims)
	}
	for _, why := range []string{"the git configuration or hooks changed", "the canary's output differs from its first run's"} {
		if !strings.Contains(stderr, why) {
			t.Errorf("the log does not say %q:\n%s", why, stderr)
		}
	}
}

func phaseCount(rep report.Report, name string) int {
	for _, p := range rep.Phases {
		if p.Name == name {
			return p.Count
		}
	}
	return 0
}
