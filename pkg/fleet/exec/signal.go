package exec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// A command that must be stopped, signalled or timed out needs its PID in
// the sandbox. The exec API gives none, so such a command is started by a
// shell that writes its own PID on stderr as the first line and then execs
// the command, which keeps that PID. The line is the wrapper's, written
// before the command runs, so the command cannot forge it.
const pidPrefix = "sandbox-fleet-pid "

// announced is argv run so that its PID comes first on its stderr; read it
// with a pidReader.
func announced(argv []string) []string {
	return append([]string{"sh", "-c", `printf '` + pidPrefix + `%s\n' "$$" >&2; exec "$@"`, "sh"}, argv...)
}

// pidReader is the stderr of an announced command: it takes the PID line
// off the front and passes the rest on.
type pidReader struct {
	w    io.Writer
	mu   sync.Mutex
	head []byte
	done bool
	pid  int
	// known is closed once the PID line was read (or found missing).
	known chan struct{}
	once  sync.Once
}

// newPIDReader passes a command's stderr on to w.
func newPIDReader(w io.Writer) *pidReader {
	return &pidReader{w: orDiscard(w), known: make(chan struct{})}
}

func (p *pidReader) Write(b []byte) (int, error) {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return p.w.Write(b)
	}
	p.head = append(p.head, b...)
	i := bytes.IndexByte(p.head, '\n')
	if i < 0 && len(p.head) < 64 {
		p.mu.Unlock()
		return len(b), nil
	}
	p.done = true
	rest := p.head
	if i >= 0 {
		if v, ok := strings.CutPrefix(string(p.head[:i]), pidPrefix); ok {
			p.pid, _ = strconv.Atoi(v)
			rest = p.head[i+1:]
		}
	}
	p.head = nil
	p.mu.Unlock()
	p.once.Do(func() { close(p.known) })
	if len(rest) > 0 {
		if _, err := p.w.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// Flush passes on what is held back, once the stream ended without a
// whole first line.
func (p *pidReader) Flush() error {
	p.mu.Lock()
	rest := p.head
	p.head, p.done = nil, true
	p.mu.Unlock()
	p.once.Do(func() { close(p.known) })
	if len(rest) > 0 {
		_, err := p.w.Write(rest)
		return err
	}
	return nil
}

// PID waits for the command's PID; 0 when the stream ended without it.
func (p *pidReader) PID(ctx context.Context) (int, error) {
	select {
	case <-p.known:
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, nil
}

// Signals a sandbox's commands can be sent: what kill(1) takes.
var Signals = []string{"INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2"}

// ValidSignal says whether sig is one of Signals (with or without "SIG").
func ValidSignal(sig string) (string, bool) {
	sig = strings.TrimPrefix(strings.ToUpper(sig), "SIG")
	for _, s := range Signals {
		if s == sig {
			return s, true
		}
	}
	return "", false
}

// Whom a signal reaches in the process tree of a PID.
type Whom int

const (
	// Tree is the process and every descendant of it, with the members of
	// its process group when it leads one: what it started in the
	// background included.
	Tree Whom = iota
	// Children is every descendant but not the process itself: a shell's
	// command, leaving the shell running.
	Children
)

// signalScript signals the processes of a tree in the sandbox. It reads
// /proc once per round (every image has /proc; not every one has pkill).
// A KILL first stops what runs under the root, looking again for what
// forked meanwhile, so that no child escapes to PID 1 while its parent
// dies; the root is killed last, a moment after, so that a shell reaps
// what it started: a zombie left to a PID 1 that reaps nothing (sleep
// infinity, as sandboxes run) would stay. Its arguments: the signal, the
// root PID, "tree" or "children".
const signalScript = `sig=$1 root=$2 whom=$3
[ -d /proc/$root ] || exit 0
procs() {
	for f in /proc/[0-9]*/stat; do
		read -r l <"$f" 2>/dev/null || continue
		r=${l##*) }
		set -- $r
		echo "${l%% *} $2 $3"
	done
}
# under prints the PIDs under the root: its descendants, and the members
# of its process group when it leads one.
under() {
	t=$(procs)
	lead=0
	while read -r p pp pg; do [ "$p" = "$root" ] && [ "$pg" = "$root" ] && lead=1; done <<EOF
$t
EOF
	set=" $root "
	more=1
	while [ $more = 1 ]; do
		more=0
		while read -r p pp pg; do
			case "$set" in *" $p "*) continue ;; esac
			case "$set" in *" $pp "*) set="$set$p "; more=1; continue ;; esac
			[ $lead = 1 ] && [ "$pg" = "$root" ] && { set="$set$p "; more=1; }
		done <<EOF
$t
EOF
	done
	echo ${set# $root }
}
if [ "$sig" = KILL ]; then
	stopped=""
	for round in 1 2 3; do
		m=$(under)
		[ "$m" = "$stopped" ] && break
		[ -n "$m" ] && kill -STOP $m 2>/dev/null
		stopped=$m
	done
	[ -n "$stopped" ] && kill -KILL $stopped 2>/dev/null
	if [ "$whom" = tree ]; then
		[ -n "$stopped" ] && { sleep 0.1 2>/dev/null || sleep 1; }
		kill -KILL $root 2>/dev/null
	fi
else
	m=$(under)
	[ "$whom" = tree ] && m="$root $m"
	[ -n "$m" ] && kill -$sig $m 2>/dev/null
fi
exit 0`

// signalCommand is the command that sends sig to whom of pid's tree.
func signalCommand(sig string, pid int, whom Whom) []string {
	w := "tree"
	if whom == Children {
		w = "children"
	}
	return []string{"sh", "-c", signalScript, "sh", sig, strconv.Itoa(pid), w}
}

// Signal sends sig to whom of pid's tree, running the signalling command
// through run in the same container.
func Signal(ctx context.Context, run Runner, container string, sig string, pid int, whom Whom) error {
	if pid <= 1 {
		return fmt.Errorf("no process to signal (pid %d)", pid)
	}
	var stderr bytes.Buffer
	code, err := run(ctx, Request{Container: container, Command: signalCommand(sig, pid, whom), Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("sending SIG%s to process %d: %w", sig, pid, err)
	}
	if code != 0 {
		return fmt.Errorf("sending SIG%s to process %d: exit %d: %s", sig, pid, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}
