package exec

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Every command the exec API starts in a container enters its PID
// namespace from outside, so there its parent PID is 0, as the container's
// own PID 1 has. After the process that ran commands through the API dies
// (serve SIGKILLed), what it started keeps running in the sandbox — a
// shell, a process, an exec in flight — and no stream leads to it any
// more. strayScript finds every such command (parent PID 0, not PID 1,
// not itself), stops it so that it starts nothing more (a shell's loop
// would start its next command as the last one dies), kills its tree as
// signalScript does, and prints how many it stopped. With a shared PID
// namespace (PID 1 the pause container) the containers' own processes
// have parent 0 too: then it stops nothing and says so.
const strayScript = `kill=$1
self=$$
read -r l </proc/1/cmdline 2>/dev/null
case "$l" in /pause*) echo shared; exit 0 ;; esac
n=0
for f in /proc/[0-9]*/stat; do
	read -r l <"$f" 2>/dev/null || continue
	p=${l%% *}
	r=${l##*) }
	set -- $r
	[ "$2" = 0 ] && [ "$1" != Z ] && [ "$p" != 1 ] && [ "$p" != "$self" ] || continue
	kill -STOP "$p" 2>/dev/null
	sh -c "$kill" sh KILL "$p" tree
	n=$((n + 1))
done
echo "$n"`

// StopStrays kills, in container through run, every command the exec API
// started there that still runs (with what it started), and returns how
// many there were. Call it only while nothing else of yours runs in the
// container: it cannot tell those apart. A container sharing its Pod's
// PID namespace is left as it is, with an error saying why.
func StopStrays(ctx context.Context, run Runner, container string) (int, error) {
	var stdout, stderr bytes.Buffer
	code, err := run(ctx, Request{Container: container, Command: []string{"sh", "-c", strayScript, "sh", signalScript},
		Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return 0, fmt.Errorf("stopping the commands left running: %w", err)
	}
	out := strings.TrimSpace(stdout.String())
	if code != 0 {
		return 0, fmt.Errorf("stopping the commands left running: exit %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	if out == "shared" {
		return 0, fmt.Errorf("the sandbox shares its Pod's PID namespace, so the commands left running cannot be told from its own processes; they were left running")
	}
	n, err := strconv.Atoi(out)
	if err != nil {
		return 0, fmt.Errorf("stopping the commands left running: unexpected output %q", out)
	}
	return n, nil
}
