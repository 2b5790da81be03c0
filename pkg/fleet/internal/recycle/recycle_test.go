package recycle_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/recycle"
)

func TestParseRecord(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      recycle.Baseline
		err       string
	}{{
		name: "a git work tree",
		out: "commit=abc\nbranch=refs/heads/main\nref=abc refs/heads/main\nref=def refs/tags/v1\n" +
			"keep=build/\nkeep=\"caf\\303\\251.so\"\nrefs=r1\nignored=i1\ngitconfig=g1\ncanary=c1\n",
		want: recycle.Baseline{Recyclable: true, Commit: "abc", Branch: "refs/heads/main",
			Refs: []string{"abc refs/heads/main", "def refs/tags/v1"}, Ignored: []string{"build/", "café.so"},
			Fingerprint: map[string]string{"refs": "r1", "ignored": "i1", "gitconfig": "g1", "canary": "c1"}},
	}, {
		name: "detached, no refs",
		out:  "commit=abc\nbranch=\nrefs=r\nignored=i\ngitconfig=g\n",
		want: recycle.Baseline{Recyclable: true, Commit: "abc", Fingerprint: map[string]string{"refs": "r", "ignored": "i", "gitconfig": "g"}},
	}, {
		name: "no git work tree",
		out:  "unrecyclable=/testbed is not the top of a git work tree\n",
		want: recycle.Baseline{Reason: "/testbed is not the top of a git work tree"},
	}, {
		name: "too much to carry",
		out:  "commit=abc\nbranch=\n" + strings.Repeat("keep="+strings.Repeat("x", 99)+"\n", 1000),
		want: recycle.Baseline{Reason: "0 refs and 1000 ignored paths to put back take 97 KiB, more than a reset command carries (96 KiB)"},
	}, {
		name: "a step failed",
		out:  "commit=abc\nerror=git reset after the canary\n",
		err:  "recording the sandbox: git reset after the canary",
	}, {
		name: "no commit",
		out:  "branch=\n",
		err:  "no commit",
	}, {
		name: "stray output",
		out:  "commit=abc\nhello\n",
		err:  `unexpected line "hello"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := recycle.ParseRecord([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseRecord = %+v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseRecord = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	spec := recycle.Spec{CheckFiles: []string{"/etc/pip.conf"}, CheckCommands: []string{"pip freeze"}}
	base := recycle.Baseline{Recyclable: true, Commit: "abc", Branch: "refs/heads/main",
		Fingerprint: map[string]string{"refs": "r", "ignored": "i", "gitconfig": "g", "file:1": "f", "command:1": "p", "canary": "c"}}
	clean := "head=abc\nonbranch=refs/heads/main\ndirty=0\nprocs=0\nscratch=0\nops=\nrefs=r\nignored=i\ngitconfig=g\nfile:1=f\ncommand:1=p\ncanary=c\n"
	for _, tc := range []struct {
		name, replace, with string
		err                 string
	}{
		{name: "clean"},
		{name: "another commit", replace: "head=abc", with: "head=fff", err: "HEAD is fff, not abc"},
		{name: "detached", replace: "onbranch=refs/heads/main", with: "onbranch=", err: `HEAD is on "", not "refs/heads/main"`},
		{name: "dirty", replace: "dirty=0", with: "dirty=3", err: "git status shows 3 changed paths"},
		{name: "a process left", replace: "procs=0", with: "procs=1", err: "1 processes still run"},
		{name: "scratch left", replace: "scratch=0", with: "scratch=2", err: "2 entries are left in the scratch directory"},
		{name: "a rebase", replace: "ops=", with: "ops= rebase-merge", err: "git operations are in progress: rebase-merge"},
		{name: "a ref", replace: "refs=r", with: "refs=x", err: "the refs differ"},
		{name: "an ignored file", replace: "ignored=i", with: "ignored=x", err: "the ignored files differ"},
		{name: "a hook", replace: "gitconfig=g", with: "gitconfig=x", err: "the git configuration or hooks changed"},
		{name: "a checked file", replace: "file:1=f", with: "file:1=x", err: "file /etc/pip.conf changed"},
		{name: "a checked command", replace: "command:1=p", with: "command:1=x", err: `the output of "pip freeze" changed`},
		{name: "the canary", replace: "canary=c", with: "canary=x", err: "the canary's output differs"},
		{name: "unreported", replace: "canary=c\n", with: "", err: "canary was not reported"},
		{name: "a failed step", replace: "head=abc", with: "error=git clean", err: "reset failed: git clean"},
		{name: "two at once", replace: "dirty=0\nprocs=0", with: "dirty=1\nprocs=2", err: "git status shows 1 changed paths; 2 processes still run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := clean
			if tc.replace != "" {
				out = strings.Replace(clean, tc.replace, tc.with, 1)
			}
			err := spec.Verify(base, []byte(out))
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("Verify = %v, want nil", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Verify = %v, want an error with %q", err, tc.err)
			}
		})
	}
}

// pidNamespace stands in for a sandbox's container: a PID namespace
// (with its own /proc) whose PID 1 is a keepalive, entered from outside
// as an exec is. It needs root; the namespace, and whatever runs in it,
// ends with the test.
type pidNamespace struct {
	t    *testing.T
	init int
}

func newPIDNamespace(t *testing.T) *pidNamespace {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "sleep", "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	children := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children")
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(children)
		if f := strings.Fields(string(b)); err == nil && len(f) == 1 {
			init, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatal(err)
			}
			return &pidNamespace{t: t, init: init}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespace's keepalive did not start: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// run runs argv in the namespace, for a minute at most, and returns its
// output.
func (ns *pidNamespace) run(argv ...string) []byte {
	ns.t.Helper()
	ctx, cancel := context.WithTimeout(ns.t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(ns.init), "--pid", "--mount", "--"}, argv...)...)
	out, err := cmd.Output()
	if err != nil {
		ns.t.Fatalf("%s: %v\n%s", argv[0], err, out)
	}
	return out
}

// sh runs a shell script in the namespace.
func (ns *pidNamespace) sh(script string, args ...string) []byte {
	return ns.run(append([]string{"sh", "-c", script, "sh"}, args...)...)
}

// repo makes a git work tree as a SWE-bench image has one: a commit on
// main, a tag, ignored build products it came with (kept by reset), and
// files for the checks.
func repo(t *testing.T, ns *pidNamespace) (dir, scratch string) {
	dir, scratch = filepath.Join(t.TempDir(), "testbed"), t.TempDir()
	ns.sh(`set -e
mkdir -p "$1" && cd "$1"
git init -q -b main
git config user.email t@example.com
git config user.name t
printf 'build/\n*.so\n*.log\n' > .gitignore
echo one > a.txt
mkdir pkg && echo 'print(1)' > pkg/mod.py
git add . && git commit -qm base && git tag v1
mkdir build && echo made > build/lib.o
echo binary > pkg/ext.so
echo 'requests==2.0' > freeze.txt && echo 'freeze.txt' >> .git/info/exclude
`, dir)
	return dir, scratch
}

// A rollout that commits, branches, tags, stashes, leaves untracked and
// ignored files, writes to the scratch directory and leaves processes
// running is undone: the next rollout finds the sandbox as it came, and
// the check says so.
func TestResetUndoesARollout(t *testing.T) {
	ns := newPIDNamespace(t)
	dir, scratch := repo(t, ns)
	spec := recycle.Spec{Workdir: dir, Scratch: scratch, CheckEnv: true,
		CheckFiles: []string{filepath.Join(dir, "freeze.txt")}, CheckCommands: []string{"cat freeze.txt"}, Canary: "cat a.txt; ls"}
	base, err := recycle.ParseRecord(ns.run(spec.Record()...))
	if err != nil || !base.Recyclable {
		t.Fatalf("ParseRecord = %+v, %v", base, err)
	}
	if base.Branch != "refs/heads/main" || len(base.Refs) != 2 || !reflect.DeepEqual(base.Ignored, []string{"build/", "freeze.txt", "pkg/ext.so"}) {
		t.Fatalf("baseline %+v: want main, two refs and the ignored files it came with", base)
	}
	for round := range 3 {
		ns.sh(`set -e
cd "$1"
echo changed >> a.txt && git commit -qam rollout
git checkout -qb feature && echo new > new.txt && git add new.txt && git commit -qm feature
git tag leftover
echo wip >> pkg/mod.py && git stash -q
echo untracked > notes.txt && mkdir -p cache/deep && echo x > cache/deep/y
echo log > run.log && echo more > build/extra.o
echo s > "$2/file" && echo h > "$2/.hidden" && mkdir "$2/dir"
git checkout -q main~1 2>/dev/null || true
(sleep 1000 >/dev/null 2>&1 &) ; (sh -c 'trap "" TERM; sleep 1000' >/dev/null 2>&1 &)
`, dir, scratch)
		out := ns.run(spec.Reset(base)...)
		if err := spec.Verify(base, out); err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, out)
		}
		state := ns.sh(`cd "$1"
git rev-parse HEAD; git symbolic-ref HEAD; git for-each-ref --format='%(refname)'; git stash list
git status --porcelain --ignored; ls -A "$2"; cat a.txt
for d in /proc/[0-9]*; do read -r s < $d/stat; case $s in "1 "*|*") Z"*) ;; *sleep*) echo "$s";; esac; done`, dir, scratch)
		want := base.Commit + "\nrefs/heads/main\nrefs/heads/main\nrefs/tags/v1\n!! build/\n!! freeze.txt\n!! pkg/ext.so\none\n"
		if string(state) != want {
			t.Errorf("round %d: after the reset the sandbox is\n%s\nwant\n%s", round, state, want)
		}
	}
}

// What a reset does not undo — a hook, a changed environment file, a
// canary whose answer changed — fails the check, naming each.
func TestResetFindsWhatItCannotUndo(t *testing.T) {
	ns := newPIDNamespace(t)
	dir, scratch := repo(t, ns)
	outside := filepath.Join(t.TempDir(), "seed")
	if err := os.WriteFile(outside, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := recycle.Spec{Workdir: dir, Scratch: scratch, CheckFiles: []string{filepath.Join(dir, "freeze.txt")},
		CheckCommands: []string{"cat freeze.txt"}, Canary: "cat " + outside}
	base, err := recycle.ParseRecord(ns.run(spec.Record()...))
	if err != nil || !base.Recyclable {
		t.Fatalf("ParseRecord = %+v, %v", base, err)
	}
	ns.sh(`set -e
printf '#!/bin/sh\nexit 0\n' > "$1/.git/hooks/pre-commit"
echo 'requests==3.0' > "$1/freeze.txt"
echo 43 > "$2"`, dir, outside)
	err = spec.Verify(base, ns.run(spec.Reset(base)...))
	for _, want := range []string{"the git configuration or hooks changed", "file " + filepath.Join(dir, "freeze.txt") + " changed",
		`the output of "cat freeze.txt" changed`, "the canary's output differs"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Verify = %v; want it to say %q", err, want)
		}
	}
}

// A sandbox without a git work tree at its work directory, or with other
// processes running, cannot be put back: Record says why.
func TestRecordTellsWhatCannotBeRecycled(t *testing.T) {
	ns := newPIDNamespace(t)
	plain := t.TempDir()
	sub := filepath.Join(t.TempDir(), "testbed")
	ns.sh(`set -e; git init -q "$1"; cd "$1"; git -c user.email=t@e -c user.name=t commit -q --allow-empty -m x; mkdir sub`, sub)
	for _, tc := range []struct {
		workdir, why string
	}{
		{filepath.Join(plain, "missing"), "no directory"},
		{plain, "is not the top of a git work tree"},
		{filepath.Join(sub, "sub"), "is not the top of a git work tree"},
	} {
		base, err := recycle.ParseRecord(ns.run(recycle.Spec{Workdir: tc.workdir}.Record()...))
		if err != nil || base.Recyclable || !strings.Contains(base.Reason, tc.why) {
			t.Errorf("Record of %s = %+v, %v; want not recyclable: %q", tc.workdir, base, err, tc.why)
		}
	}
	ns.sh(`sleep 1000 >/dev/null 2>&1 &`)
	base, err := recycle.ParseRecord(ns.run(recycle.Spec{Workdir: sub}.Record()...))
	if err != nil || base.Recyclable || !strings.Contains(base.Reason, "1 processes run besides the keepalive") {
		t.Errorf("Record with a process running = %+v, %v; want not recyclable", base, err)
	}
}

// A sandbox that came with a detached HEAD is put back detached, at its
// commit, after a rollout that went back onto a branch and committed.
func TestResetKeepsADetachedHead(t *testing.T) {
	ns := newPIDNamespace(t)
	dir, scratch := repo(t, ns)
	ns.sh(`cd "$1" && git checkout -q --detach`, dir)
	spec := recycle.Spec{Workdir: dir, Scratch: scratch}
	base, err := recycle.ParseRecord(ns.run(spec.Record()...))
	if err != nil || !base.Recyclable || base.Branch != "" {
		t.Fatalf("ParseRecord = %+v, %v; want a detached baseline", base, err)
	}
	ns.sh(`cd "$1" && git checkout -q main && echo more >> a.txt && git commit -qam rollout`, dir)
	out := ns.run(spec.Reset(base)...)
	if err := spec.Verify(base, out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if state := string(ns.sh(`cd "$1" && git rev-parse HEAD && git symbolic-ref -q HEAD; git rev-parse main`, dir)); state != base.Commit+"\n"+base.Commit+"\n" {
		t.Errorf("after the reset: %q, want HEAD detached at %s and main back there", state, base.Commit)
	}
}
