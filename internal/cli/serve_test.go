package cli_test

import (
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli"
)

// Flags serve cannot take together, or cannot take at all, are usage
// errors that say which and what to do, before anything is created; a
// session to resume that does not exist is an error that says so.
func TestServeBadInput(t *testing.T) {
	ns := cluster.NewNamespace(t)
	dir := write(t, map[string]string{"t.jsonl": `{"id": "a", "image": "busybox:1.36"}` + "\n"})
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"resume and session name", []string{"--resume", "r1", "--session-name", "r1"}, "--resume and --session-name: give one"},
		{"resume under another run id", []string{"--resume", "r1", "--run-id", "r2"}, "a resumed session keeps its run id"},
		{"resume with tasks", []string{"--resume", "r1", "--tasks", dir + "/t.jsonl"}, "--tasks with --resume"},
		{"resume with a lease TTL", []string{"--resume", "r1", "--lease-ttl", "5s"}, "--lease-ttl with --resume: a resumed session keeps the options"},
		{"session name with a run id", []string{"--session-name", "r1", "--run-id", "r1"}, "--session-name names the session's run id"},
		{"session name not a label", []string{"--session-name", "RL_1"}, `--run-id "RL_1"`},
		{"accounts and a token file", []string{"--allow-service-account", "rl/trainer", "--token-file", dir + "/token"}, "--allow-service-account and --token-file"},
		{"an account without its namespace", []string{"--allow-service-account", "trainer"}, `--allow-service-account "trainer": give NAMESPACE/NAME`},
		{"prepull high-water out of range", []string{"--prepull", "--prepull-high-water", "101"}, "--prepull-high-water 101: must be a percentage"},
		{"heartbeat under a second", []string{"--heartbeat", "500ms"}, "--heartbeat 500ms: must be at least 1s (a Lease's duration is whole seconds)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := execute(append([]string{"serve", "-n", ns}, tt.args...)...)
			if code != cli.ExitUsage || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, cli.ExitUsage, tt.want)
			}
		})
	}
	code, _, stderr := execute("serve", "-n", ns, "--resume", "never-served")
	if code == 0 || !strings.Contains(stderr, "run never-served in namespace "+ns+": no session state") {
		t.Errorf("resuming a session that does not exist: exit %d, stderr %q", code, stderr)
	}
	assertNothingIn(t, ns)
}
