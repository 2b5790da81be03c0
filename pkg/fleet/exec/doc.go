// Package exec runs commands in sandbox Pods through the API server, the
// way `kubectl exec` does: over WebSocket, falling back to SPDY for API
// servers or proxies that do not upgrade WebSockets. No sandbox router and
// no in-sandbox agent are needed.
//
// A fleet's sandbox (fleet.Sandbox) hands out what this package builds;
// most users meet its types there and in the session's API rather than
// calling its constructors.
//
// # One command
//
// A Request names the command, its container and streams, and its
// Timeout. Run runs it once; Bounded stops it at its timeout as
// timeout(1) would, but in the sandbox: the command's whole process tree
// is killed and the Result is TimedOut with exit code 124 — the task's
// failure, not the sandbox's.
//
// # Shells
//
// OpenShell starts one long-lived shell (ShellSh, or ShellBashOrSh as the
// agent frameworks' sessions run bash) and Shell.Run sends it a Command:
// an Argv run in a subshell, or a Script run in the shell itself, so that
// its state (cwd, variables, functions) carries to the next. A command
// past its timeout, or interrupted, is signalled in the sandbox and the
// shell goes on.
//
// # Processes
//
// StartProcess starts a command its caller drives while it runs: its
// output kept as Events to read from any index by any number of readers,
// stdin to write, signals (Signals) to its process tree, its end.
//
// # Ports
//
// PortForward serves a port of the sandbox's Pod on 127.0.0.1, through
// the API server's port-forward.
//
// # Runners
//
// Everything above is built on a Runner, a function that runs one
// Request: Run bound to a cluster, a sandbox's own, or local processes in
// tests. Signals and timeouts need only sh and /proc in the image; the
// PID of a command to signal is read from a line a wrapping sh writes
// before it execs the command.
package exec
