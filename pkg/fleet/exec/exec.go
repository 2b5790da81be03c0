package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// Protocol chooses the streaming protocol.
type Protocol int

const (
	// WebSocketWithFallback tries WebSocket and falls back to SPDY when the
	// upgrade is refused.
	WebSocketWithFallback Protocol = iota
	WebSocket
	SPDY
)

// Request is one command to run.
type Request struct {
	Namespace, Pod, Container string
	Command                   []string
	// Stdin, when set, is streamed to the command, which sees EOF after it.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Protocol       Protocol
	// Timeout, when set, is the command's: a sandbox's Exec (through
	// Bounded, or its shell) stops it there and reports it timed out. Run
	// itself ignores it.
	Timeout time.Duration
}

// Runner runs a request in a sandbox and returns its exit code, as Run
// does through the API server. Bounded, OpenShell, StartProcess and Signal
// take one, so that what they build on an exec — timeouts, shells,
// processes, signals — runs over any runner: a sandbox's, or local
// processes in tests.
type Runner func(ctx context.Context, r Request) (int, error)

// Run runs the command and returns its exit code. A command that ran and
// exited non-zero is not an error; failing to run it is.
func Run(ctx context.Context, cfg *rest.Config, kc kubernetes.Interface, r Request) (int, error) {
	req := kc.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(r.Namespace).Name(r.Pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: r.Container,
			Command:   r.Command,
			Stdin:     r.Stdin != nil,
			Stdout:    r.Stdout != nil,
			Stderr:    r.Stderr != nil,
		}, scheme.ParameterCodec)
	executor, err := newExecutor(cfg, r.Protocol, req)
	if err != nil {
		return 0, err
	}
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr})
	var exit utilexec.CodeExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.Code, nil
	default:
		return 0, fmt.Errorf("exec in pod %s/%s: %w", r.Namespace, r.Pod, err)
	}
}

func newExecutor(cfg *rest.Config, p Protocol, req *rest.Request) (remotecommand.Executor, error) {
	switch p {
	case SPDY:
		return remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	case WebSocket:
		return remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	default:
		ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			return nil, err
		}
		spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
		if err != nil {
			return nil, err
		}
		return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
}
