// Package recycle resets a sandbox between rollouts of the same image, so
// that the next rollout takes it over instead of a fresh claim, and says
// whether the reset took: a rollout must never see another's leftovers.
//
// At a sandbox's first use, Record's script notes what the sandbox is —
// its work tree's commit, branch, refs, git configuration and hooks, the
// ignored files it came with, and the opt-in environment, file, command
// and canary fingerprints. Between rollouts, Reset's script stops every
// process but the sandbox's keepalive (PID 1), puts the work tree back to
// that commit and those refs, removes what is untracked or ignored (but
// for the ignored files the sandbox came with), empties the scratch
// directory and the reflog, runs the canary and cleans up after it, then
// prints the same fingerprint; Verify compares it with the record. Any
// difference, and any step that failed, quarantines the sandbox.
//
// The scripts need only a POSIX shell and git in the sandbox: fingerprints
// are hashed with git hash-object, and processes are found in /proc.
package recycle

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/exec"
)

// Spec says how the sandboxes of an image are reset and checked.
type Spec struct {
	// Workdir is the git work tree put back at each reset.
	Workdir string
	// Scratch is the directory emptied at each reset.
	Scratch string
	// CheckEnv compares the environment a command in the sandbox sees.
	CheckEnv bool
	// CheckFiles are files whose contents must not change.
	CheckFiles []string
	// CheckCommands are shell commands, run in Workdir, whose output must
	// not change (e.g. pip freeze).
	CheckCommands []string
	// Canary is a shell command run in Workdir after each reset whose
	// output and exit code must equal those of the sandbox's first use.
	Canary string
}

// DefaultScratch is Spec's Scratch unless it says otherwise; its Workdir's
// is config.DefaultWorkdir.
const DefaultScratch = "/tmp"

func (s Spec) withDefaults() Spec {
	if s.Workdir == "" {
		s.Workdir = config.DefaultWorkdir
	}
	if s.Scratch == "" {
		s.Scratch = DefaultScratch
	}
	return s
}

// Baseline is what a sandbox was at its first use.
type Baseline struct {
	// Recyclable is false when the sandbox cannot be put back (no git work
	// tree, no commit, processes besides the keepalive); Reason says why.
	Recyclable bool
	Reason     string
	// Commit and Branch are where the work tree's HEAD was (Branch empty
	// when detached); Refs every ref, as "object name" lines.
	Commit, Branch string
	Refs           []string
	// Ignored are the ignored paths the sandbox came with, which reset
	// keeps.
	Ignored []string
	// Fingerprint is what Verify compares after each reset.
	Fingerprint map[string]string
}

// Record is the command (sh -c) that makes a sandbox's Baseline, read with
// ParseRecord. It changes nothing in the sandbox but what the canary does,
// which it cleans up after as a reset would; ignored files the canary
// made stay for the first rollout, and go at the first reset.
func (s Spec) Record() []string {
	s = s.withDefaults()
	var b strings.Builder
	b.WriteString(prelude(s))
	b.WriteString(`procs
[ "$n" = 0 ] || { echo "unrecyclable=$n processes run besides the keepalive"; exit 0; }
cd -- "$wd" 2>/dev/null || { echo "unrecyclable=no directory $wd"; exit 0; }
[ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ] || { echo "unrecyclable=$wd is not the top of a git work tree"; exit 0; }
commit=$(git rev-parse -q --verify 'HEAD^{commit}') || { echo "unrecyclable=the work tree in $wd has no commit"; exit 0; }
echo "commit=$commit"
echo "branch=$(git symbolic-ref -q HEAD)"
git for-each-ref --format='ref=%(objectname) %(refname)'
ignored | while IFS= read -r p; do echo "keep=$p"; done
paths || { echo "error=git rev-parse --git-dir failed in $wd"; exit 0; }
fingerprint
`)
	if s.Canary != "" {
		b.WriteString(`canary
echo "canary=$canary"
stop
git reset -q --hard "$commit" || fail "git reset after the canary"
git clean -q -ffd || fail "git clean after the canary"
scrub
`)
	}
	return []string{"sh", "-c", b.String(), "sh"}
}

// Reset is the command (sh -c) that puts a sandbox back to b and prints
// what Verify checks.
func (s Spec) Reset(b Baseline) []string {
	s = s.withDefaults()
	var sb strings.Builder
	sb.WriteString(prelude(s))
	fmt.Fprintf(&sb, "commit=%s\nbranch=%s\n", exec.Quote(b.Commit), exec.Quote(b.Branch))
	sb.WriteString(`stop
cd -- "$wd" || fail "no directory $wd"
paths || fail "$wd is not a git work tree"
for op in $ops; do if [ -e "$gitdir/$op" ]; then rm -rf -- "$gitdir/$op"; fi; done
git checkout -q -f --detach "$commit" || fail "git checkout $commit"
git for-each-ref --format='delete %(refname)' | git update-ref --stdin || fail "deleting the refs made since"
`)
	if len(b.Refs) > 0 {
		sb.WriteString("git update-ref --stdin <<'SANDBOX_FLEET_REFS' || fail \"putting the refs back\"\n")
		for _, r := range b.Refs {
			oid, name, _ := strings.Cut(r, " ")
			fmt.Fprintf(&sb, "create %s %s\n", name, oid)
		}
		sb.WriteString("SANDBOX_FLEET_REFS\n")
	}
	sb.WriteString(`if [ -n "$branch" ]; then git symbolic-ref HEAD "$branch" || fail "git symbolic-ref HEAD $branch"; fi
git reset -q --hard "$commit" || fail "git reset --hard $commit"
`)
	clean := "git clean -q -ffdx"
	for _, p := range b.Ignored {
		clean += " -e " + exec.Quote("/"+escapeGlob(p))
	}
	sb.WriteString(clean + ` || fail "git clean"
git reflog expire --expire=now --all || fail "git reflog expire"
git worktree prune
scrub
`)
	if s.Canary != "" {
		sb.WriteString("canary\nstop\n")
		sb.WriteString(`git reset -q --hard "$commit" || fail "git reset after the canary"
` + clean + ` || fail "git clean after the canary"
scrub
`)
	}
	sb.WriteString(`{ read -r head; read -r onbranch; } <<-EOF
	$(git rev-parse HEAD --symbolic-full-name HEAD 2>/dev/null)
	EOF
[ "$onbranch" = HEAD ] && onbranch=
echo "head=$head"
echo "onbranch=$onbranch"
echo "dirty=$(git status --porcelain | wc -l)"
procs
echo "procs=$n"
echo "scratch=$(entries "$scratch")"
left=
for op in $ops; do [ -e "$gitdir/$op" ] && left="$left $op"; done
echo "ops=$left"
fingerprint
`)
	if s.Canary != "" {
		sb.WriteString("echo \"canary=$canary\"\n")
	}
	return []string{"sh", "-c", sb.String(), "sh"}
}

// prelude defines the scripts' settings and shell functions: the
// fingerprint, the canary, stopping processes and emptying the scratch
// directory.
func prelude(s Spec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "set -u\nwd=%s\nscratch=%s\n", exec.Quote(s.Workdir), exec.Quote(s.Scratch))
	b.WriteString(`# ops are the files of git operations in progress, in the git dir.
ops='rebase-merge rebase-apply MERGE_HEAD MERGE_MSG MERGE_MODE CHERRY_PICK_HEAD REVERT_HEAD BISECT_LOG BISECT_START sequencer'
fail() { echo "error=$*"; exit 0; }
# hash reads stdin; git hash-object is there wherever git is.
hash() { git hash-object --stdin; }
# procs counts in n the processes but the keepalive (PID 1), this shell
# and its parent, and kills them with "procs kill"; zombies, which nothing
# can stop, do not count. Builtins only: no process of its own to count.
procs() {
	n=0
	for d in /proc/[0-9]*; do
		p=${d#/proc/}
		if [ "$p" = 1 ] || [ "$p" = $$ ] || [ "$p" = "$PPID" ]; then continue; fi
		read -r stat 2>/dev/null <"$d/stat" || continue
		case ${stat##*") "} in Z* | X*) continue ;; esac
		n=$((n + 1))
		if [ "${1:-}" = kill ]; then kill -9 "$p" 2>/dev/null; fi
	done
}
# stop kills every process but the keepalive, this shell and its parent,
# again while any is left: what was forked meanwhile goes in the next
# round. After ten quick rounds it waits a little between rounds, up to
# about five seconds: a killed process in uninterruptible sleep (its
# writes flushing, on a busy disk) goes only once that ends.
stop() {
	i=0
	procs kill
	while [ "$n" -gt 0 ] && [ "$i" -lt 100 ]; do
		# A sleep without fractions waits a second: it counts for 20.
		if [ "$i" -ge 10 ] && ! sleep 0.05 2>/dev/null; then
			sleep 1
			i=$((i + 19))
		fi
		procs kill
		i=$((i + 1))
	done
}
entries() {
	n=0
	for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		if [ -e "$f" ] || [ -L "$f" ]; then n=$((n + 1)); fi
	done
	echo "$n"
}
scrub() {
	rm -rf -- "$scratch"/* "$scratch"/.[!.]* "$scratch"/..?* || fail "emptying $scratch"
}
ignored() { git ls-files --others --ignored --exclude-standard --directory "$@"; }
# paths sets gitdir, config and hooks, the git paths the scripts read, with
# one git process.
paths() {
	{ read -r gitdir; read -r config; read -r hooks; } <<-EOF
	$(git rev-parse --git-dir --git-path config --git-path hooks)
	EOF
	[ -n "$gitdir" ]
}
fingerprint() {
	echo "refs=$(git for-each-ref --format='%(objectname) %(refname)' | hash)"
	echo "ignored=$(ignored | hash)"
	# One cat, whatever the number of hooks: each process is a fork and
	# an exec, and a reset pays for every one.
	echo "gitconfig=$( (for h in "$hooks"/*; do [ -f "$h" ] && echo "$h"; done; cat -- "$config" "$hooks"/*) 2>/dev/null | hash)"
`)
	if s.CheckEnv {
		b.WriteString("\techo \"env=$( (cd / && env) | grep -v -e '^PWD=' -e '^OLDPWD=' -e '^SHLVL=' -e '^_=' | hash)\"\n")
	}
	for i, f := range s.CheckFiles {
		fmt.Fprintf(&b, "\techo \"file:%d=$( (cat -- %s 2>&1; echo \"exit $?\") | hash)\"\n", i+1, exec.Quote(f))
	}
	for i, c := range s.CheckCommands {
		fmt.Fprintf(&b, "\techo \"command:%d=$( (sh -c %s 2>&1; echo \"exit $?\") </dev/null | hash)\"\n", i+1, exec.Quote(c))
	}
	b.WriteString("}\n")
	if s.Canary != "" {
		fmt.Fprintf(&b, "canary() { canary=$( (sh -c %s 2>&1; echo \"exit $?\") </dev/null | hash); }\n", exec.Quote(s.Canary))
	}
	return b.String()
}

// ParseRecord reads the output of Record.
func ParseRecord(out []byte) (Baseline, error) {
	kv, lists, err := parse(out)
	if err != nil {
		return Baseline{}, err
	}
	if why, ok := kv["unrecyclable"]; ok {
		return Baseline{Reason: why}, nil
	}
	if e, ok := kv["error"]; ok {
		return Baseline{}, fmt.Errorf("recording the sandbox: %s", e)
	}
	b := Baseline{Recyclable: true, Commit: kv["commit"], Branch: kv["branch"], Refs: lists["ref"]}
	if b.Commit == "" {
		return Baseline{}, fmt.Errorf("recording the sandbox: no commit in its output %q", out)
	}
	for _, p := range lists["keep"] {
		// git quotes a path with unusual bytes as a C string.
		if strings.HasPrefix(p, `"`) {
			unquoted, err := strconv.Unquote(p)
			if err != nil {
				return Baseline{}, fmt.Errorf("recording the sandbox: ignored path %s: %w", p, err)
			}
			p = unquoted
		}
		b.Ignored = append(b.Ignored, p)
	}
	delete(kv, "commit")
	delete(kv, "branch")
	b.Fingerprint = kv
	if size := len(strings.Join(b.Refs, "\n")) + len(strings.Join(b.Ignored, "\n")); size > maxCarried {
		return Baseline{Reason: fmt.Sprintf("%d refs and %d ignored paths to put back take %d KiB, more than a reset command carries (%d KiB)",
			len(b.Refs), len(b.Ignored), size>>10, maxCarried>>10)}, nil
	}
	return b, nil
}

// maxCarried bounds the refs and ignored paths a Reset command carries:
// the whole script is one argument, which Linux takes up to 128 KiB.
const maxCarried = 96 << 10

// Verify reads the output of s.Reset(b) and returns an error naming every
// way the sandbox differs from b, or the step that failed.
func (s Spec) Verify(b Baseline, out []byte) error {
	kv, _, err := parse(out)
	if err != nil {
		return err
	}
	if e, ok := kv["error"]; ok {
		return fmt.Errorf("reset failed: %s", e)
	}
	var diffs []string
	want := map[string]string{"head": b.Commit, "onbranch": b.Branch, "dirty": "0", "procs": "0", "scratch": "0", "ops": ""}
	maps.Copy(want, b.Fingerprint)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got, ok := kv[k]
		switch {
		case !ok:
			diffs = append(diffs, k+" was not reported")
		case got != want[k]:
			diffs = append(diffs, s.difference(k, want[k], got))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("the sandbox did not come clean: %s", strings.Join(diffs, "; "))
	}
	return nil
}

func (s Spec) difference(key, want, got string) string {
	kind, n, _ := strings.Cut(key, ":")
	i, _ := strconv.Atoi(n)
	switch {
	case kind == "file" && i >= 1 && i <= len(s.CheckFiles):
		return fmt.Sprintf("file %s changed", s.CheckFiles[i-1])
	case kind == "command" && i >= 1 && i <= len(s.CheckCommands):
		return fmt.Sprintf("the output of %q changed", s.CheckCommands[i-1])
	}
	switch key {
	case "head":
		return fmt.Sprintf("HEAD is %s, not %s", got, want)
	case "onbranch":
		return fmt.Sprintf("HEAD is on %q, not %q", got, want)
	case "dirty":
		return fmt.Sprintf("git status shows %s changed paths", got)
	case "procs":
		return fmt.Sprintf("%s processes still run besides the keepalive", got)
	case "scratch":
		return fmt.Sprintf("%s entries are left in the scratch directory", got)
	case "ops":
		return fmt.Sprintf("git operations are in progress: %s", got)
	case "canary":
		return "the canary's output differs from its first run's"
	case "refs":
		return "the refs differ"
	case "ignored":
		return "the ignored files differ"
	case "gitconfig":
		return "the git configuration or hooks changed"
	case "env":
		return "the environment changed"
	}
	return key + " changed"
}

// parse reads key=value lines; ref and keep may come more than once.
func parse(out []byte) (kv map[string]string, lists map[string][]string, err error) {
	kv, lists = map[string]string{}, map[string][]string{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("unexpected line %q in the sandbox's output", line)
		case k == "ref" || k == "keep":
			lists[k] = append(lists[k], v)
		default:
			kv[k] = strings.TrimSpace(v)
		}
	}
	return kv, lists, nil
}

// escapeGlob makes a path a git pattern that matches only itself.
func escapeGlob(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	if strings.HasSuffix(p, " ") {
		return strings.TrimSuffix(b.String(), " ") + `\ `
	}
	return b.String()
}
