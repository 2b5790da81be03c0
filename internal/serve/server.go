// Package serve serves a fleet session (package session) over the fleet
// session API (api/fleet/v1) with Connect: one port speaks Connect's JSON
// and binary protocols, gRPC and gRPC-Web, so a Python trainer needs only
// HTTP and JSON.
package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/session"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracing"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// Service implements the fleet session API over a session.
type Service struct {
	Session *session.Session
	// closed is closed once a Close call has torn the session down.
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ fleetv1connect.FleetServiceHandler = (*Service)(nil)

// NewService serves s.
func NewService(s *session.Session) *Service {
	return &Service{Session: s, closed: make(chan struct{})}
}

// Closed is closed once a client's Close has torn the session down.
func (v *Service) Closed() <-chan struct{} { return v.closed }

// ClosedByClient reports whether a client's Close tore the session down.
func (v *Service) ClosedByClient() bool {
	select {
	case <-v.closed:
		return true
	default:
		return false
	}
}

// Shutdown tears the session down, once.
func (v *Service) Shutdown(ctx context.Context) error {
	v.closeOnce.Do(func() {
		v.closeErr = v.Session.Close(ctx)
		close(v.closed)
	})
	return v.closeErr
}

// toConnect gives err its status code and, for a failure of the sandbox or
// the cluster, its verdict and reason as metadata.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var infra *verdict.Error
	var code connect.Code
	switch {
	case errors.Is(err, session.ErrInvalid):
		code = connect.CodeInvalidArgument
	case errors.Is(err, session.ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, session.ErrForeign):
		cerr := connect.NewError(connect.CodePermissionDenied, err)
		cerr.Meta().Set(fleetv1.ReasonHeader, fleetv1.ReasonForeign)
		return cerr
	case errors.Is(err, session.ErrClosed), errors.Is(err, session.ErrFailed), errors.Is(err, session.ErrNotWarming):
		code = connect.CodeFailedPrecondition
		cerr := connect.NewError(code, err)
		cerr.Meta().Set(fleetv1.ReasonHeader, preconditionReason(err))
		return cerr
	case errors.As(err, &infra):
		code = map[string]connect.Code{
			verdict.Start: connect.CodeFailedPrecondition, verdict.Lost: connect.CodeAborted,
			verdict.Timeout: connect.CodeDeadlineExceeded, verdict.API: connect.CodeUnavailable,
		}[infra.Reason]
		if code == 0 {
			code = connect.CodeInternal
		}
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	default:
		code = connect.CodeInternal
	}
	cerr := connect.NewError(code, err)
	if infra != nil {
		cerr.Meta().Set(fleetv1.VerdictHeader, verdict.Infra)
		cerr.Meta().Set(fleetv1.ReasonHeader, infra.Reason)
	}
	return cerr
}

// preconditionReason tells apart the failed preconditions a client acts on
// differently: a closed session is over, a failed transfer names what
// failed, a wait for pools nothing warms needs a Lookahead first.
func preconditionReason(err error) string {
	switch {
	case errors.Is(err, session.ErrClosed):
		return fleetv1.ReasonClosed
	case errors.Is(err, session.ErrFailed):
		return fleetv1.ReasonFailed
	default:
		return fleetv1.ReasonNotWarming
	}
}

func (v *Service) AddTasks(_ context.Context, req *connect.Request[fleetv1.AddTasksRequest]) (*connect.Response[fleetv1.AddTasksResponse], error) {
	changes, n, err := v.addTasks(req.Msg)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &fleetv1.AddTasksResponse{Added: int32(n), Total: int32(v.Session.TaskCount())}
	for _, c := range changes {
		out.Pools = append(out.Pools, &fleetv1.PoolChange{Image: c.Image, Pool: c.Pool, Before: int32(c.Before), Replicas: int32(c.Replicas)})
	}
	return connect.NewResponse(out), nil
}

// addTasks adds the request's tasks, or its rows read as a task file's.
func (v *Service) addTasks(m *fleetv1.AddTasksRequest) ([]fleet.PoolChange, int, error) {
	if len(m.Rows) == 0 {
		if m.IdField != "" || m.ImageField != "" || len(m.Rewrite) > 0 {
			return nil, 0, fmt.Errorf("%w: id_field, image_field and rewrite apply to rows; give the tasks as rows", session.ErrInvalid)
		}
		ts := make([]tasks.Task, len(m.Tasks))
		for i, t := range m.Tasks {
			ts[i] = tasks.Task{ID: t.Id, Image: t.Image, Metadata: t.Metadata.AsMap()}
			if len(ts[i].Metadata) == 0 {
				ts[i].Metadata = nil
			}
		}
		changes, err := v.Session.AddTasks(ts, "AddTasks")
		return changes, len(ts), err
	}
	if len(m.Tasks) > 0 {
		return nil, 0, fmt.Errorf("%w: give tasks or rows, not both", session.ErrInvalid)
	}
	opts := tasks.Options{IDField: m.IdField, ImageField: m.ImageField, IDOption: "id_field", ImageOption: "image_field"}
	for i, r := range m.Rewrite {
		rule, err := images.ParseRule(r)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: rewrite[%d]: %w", session.ErrInvalid, i, err)
		}
		opts.Rewrite = append(opts.Rewrite, rule)
	}
	changes, err := v.Session.AddRows(m.Rows, opts, "rows")
	return changes, len(m.Rows), err
}

func (v *Service) PlanRun(_ context.Context, req *connect.Request[fleetv1.PlanRunRequest]) (*connect.Response[fleetv1.PlanRunResponse], error) {
	p, ids, err := v.Session.RunPlan(req.Msg.Strategy, int(req.Msg.Concurrency))
	if err != nil {
		return nil, toConnect(err)
	}
	out := &fleetv1.PlanRunResponse{Strategy: p.Strategy, Concurrency: int32(p.Concurrency), Recycle: v.Session.Fleet().Recycling()}
	for i, w := range p.Windows {
		out.Windows = append(out.Windows, &fleetv1.RunWindow{Images: w.Images, TaskIds: ids[i], Warm: w.Warm, LetGo: w.LetGo})
	}
	for _, t := range v.Session.Fleet().Tasks() {
		meta, err := structpb.NewStruct(t.Metadata)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("task %s's metadata: %w", t.ID, err))
		}
		out.Tasks = append(out.Tasks, &fleetv1.Task{Id: t.ID, Image: t.Image, Metadata: meta})
	}
	return connect.NewResponse(out), nil
}

func (v *Service) Unwarm(ctx context.Context, req *connect.Request[fleetv1.UnwarmRequest]) (*connect.Response[fleetv1.UnwarmResponse], error) {
	gone, err := v.Session.Unwarm(ctx, req.Msg.Images)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.UnwarmResponse{Images: gone}), nil
}

func (v *Service) Lookahead(ctx context.Context, req *connect.Request[fleetv1.LookaheadRequest]) (*connect.Response[fleetv1.LookaheadResponse], error) {
	images, err := v.Session.Lookahead(req.Msg.TaskIds, req.Msg.Images)
	if err != nil {
		return nil, toConnect(err)
	}
	pools, err := v.Session.Pools(ctx, images)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.LookaheadResponse{Pools: poolsOf(pools)}), nil
}

func (v *Service) WaitPoolsReady(ctx context.Context, req *connect.Request[fleetv1.WaitPoolsReadyRequest]) (*connect.Response[fleetv1.WaitPoolsReadyResponse], error) {
	timeout := req.Msg.Timeout.AsDuration()
	if req.Msg.Timeout == nil || timeout <= 0 {
		return nil, toConnect(fmt.Errorf("%w: timeout must be positive, e.g. \"300s\"", session.ErrInvalid))
	}
	ready, pools, err := v.Session.WaitPoolsReady(ctx, req.Msg.Images, timeout)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.WaitPoolsReadyResponse{Ready: ready, Pools: poolsOf(pools)}), nil
}

func poolsOf(pools []session.PoolStatus) []*fleetv1.Pool {
	out := make([]*fleetv1.Pool, len(pools))
	for i, p := range pools {
		out[i] = &fleetv1.Pool{Image: p.Image, Name: p.Pool, Cluster: p.Cluster, Tasks: int32(p.Tasks),
			Desired: int32(p.Desired), Ready: int32(p.Ready), Warm: p.Warm}
		if p.Err != nil {
			out[i].Error = p.Err.Error()
		}
		if !p.LastWanted.IsZero() {
			out[i].LastWanted = timestamppb.New(p.LastWanted)
		}
	}
	return out
}

func (v *Service) Acquire(ctx context.Context, req *connect.Request[fleetv1.AcquireRequest]) (*connect.Response[fleetv1.AcquireResponse], error) {
	m := req.Msg
	// A timeout given must be one to wait: 0s or less would hand out a
	// sandbox as if none had been given.
	if m.Timeout != nil && m.Timeout.AsDuration() <= 0 {
		return nil, toConnect(fmt.Errorf("%w: timeout %s: give a positive duration, or none for the session's ready timeout",
			session.ErrInvalid, m.Timeout.AsDuration()))
	}
	h, err := v.Session.Acquire(ctx, session.AcquireRequest{RequestID: m.RequestId, ClientID: m.ClientId,
		TaskID: m.TaskId, Image: m.Image, Timeout: m.Timeout.AsDuration()})
	if err != nil {
		return nil, toConnect(err)
	}
	annotate(ctx, tracing.TaskID.String(h.TaskID), tracing.TaskImage.String(h.Image), tracing.Cluster.String(h.Cluster),
		tracing.Node.String(h.Node), tracing.Sandbox.String(h.Sandbox.Sandbox), tracing.Warm.Bool(h.Warm || h.Resets > 0))
	return connect.NewResponse(&fleetv1.AcquireResponse{Handle: v.handleOf(h)}), nil
}

func (v *Service) handleOf(h *session.Handle) *fleetv1.Handle {
	return &fleetv1.Handle{Id: h.Claim, TaskId: h.TaskID, Image: h.Image, Cluster: h.Cluster, Namespace: h.Namespace,
		Claim: h.Claim, Sandbox: h.Sandbox.Sandbox, Pod: h.Pod, PodIp: h.PodIP, Hostname: h.Hostname, Node: h.Node,
		Container: fleet.ContainerName, ClientId: h.Client, LeaseExpires: timestamppb.New(v.Session.LeaseExpiry(h.Client)),
		Resets: int32(h.Resets)}
}

func (v *Service) Renew(_ context.Context, req *connect.Request[fleetv1.RenewRequest]) (*connect.Response[fleetv1.RenewResponse], error) {
	n, err := v.Session.Renew(req.Msg.ClientId)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.RenewResponse{Handles: int32(n), LeaseTtl: durationpb.New(v.Session.Options().LeaseTTL)}), nil
}

// sender sends what is written to it as stream messages, one writer at a
// time: a command's stdout and stderr are copied concurrently.
type sender struct {
	mu   *sync.Mutex
	send func(p []byte) error
}

func (s sender) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.send(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// outputTo sends a command's stdout and stderr as stream messages, and
// its end as the last.
type outputTo struct {
	mu     sync.Mutex
	stream *connect.ServerStream[fleetv1.ExecResponse]
}

func (o *outputTo) stdout() io.Writer {
	return sender{&o.mu, func(p []byte) error { return o.stream.Send(&fleetv1.ExecResponse{Stdout: p}) }}
}

func (o *outputTo) stderr() io.Writer {
	return sender{&o.mu, func(p []byte) error { return o.stream.Send(&fleetv1.ExecResponse{Stderr: p}) }}
}

func (o *outputTo) end(ctx context.Context, r session.ExecResult) error {
	annotate(ctx, attribute.Int("sandbox_fleet.exit_code", r.ExitCode), attribute.Bool("sandbox_fleet.timed_out", r.TimedOut))
	o.mu.Lock()
	defer o.mu.Unlock()
	c := int32(r.ExitCode)
	return o.stream.Send(&fleetv1.ExecResponse{ExitCode: &c, TimedOut: r.TimedOut})
}

func (v *Service) Exec(ctx context.Context, req *connect.Request[fleetv1.ExecRequest], stream *connect.ServerStream[fleetv1.ExecResponse]) error {
	m := req.Msg
	out := &outputTo{stream: stream}
	r := session.ExecRequest{Argv: m.Argv, Timeout: m.Timeout.AsDuration(), Container: m.Container, Env: m.Env, Cwd: m.Cwd,
		Stdout: out.stdout(), Stderr: out.stderr()}
	if m.Stdin != nil {
		r.Stdin = bytes.NewReader(m.Stdin)
	}
	annotate(ctx, tracing.Sandbox.String(m.Handle))
	res, err := v.Session.Exec(ctx, m.Handle, m.ClientId, r)
	if err != nil {
		return toConnect(err)
	}
	return out.end(ctx, res)
}

func (v *Service) Alive(ctx context.Context, req *connect.Request[fleetv1.AliveRequest]) (*connect.Response[fleetv1.AliveResponse], error) {
	alive, why, err := v.Session.Alive(ctx, req.Msg.Handle, req.Msg.ClientId)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.AliveResponse{Alive: alive, Reason: why}), nil
}

func (v *Service) OpenShell(ctx context.Context, req *connect.Request[fleetv1.ShellRequest]) (*connect.Response[fleetv1.OpenShellResponse], error) {
	created, err := v.Session.OpenShell(ctx, req.Msg.Handle, req.Msg.ClientId, req.Msg.Shell, req.Msg.Container)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.OpenShellResponse{Created: created}), nil
}

func (v *Service) ShellRun(ctx context.Context, req *connect.Request[fleetv1.ShellRunRequest], stream *connect.ServerStream[fleetv1.ExecResponse]) error {
	m := req.Msg
	out := &outputTo{stream: stream}
	annotate(ctx, tracing.Sandbox.String(m.Handle))
	res, err := v.Session.ShellRun(ctx, m.Handle, m.ClientId, m.Shell,
		session.ShellCommand{Script: m.Script, Timeout: m.Timeout.AsDuration(), MergeStderr: m.MergeStderr}, out.stdout(), out.stderr())
	if err != nil {
		return toConnect(err)
	}
	return out.end(ctx, res)
}

func (v *Service) ShellInterrupt(ctx context.Context, req *connect.Request[fleetv1.ShellRequest]) (*connect.Response[fleetv1.ShellInterruptResponse], error) {
	if err := v.Session.ShellInterrupt(ctx, req.Msg.Handle, req.Msg.ClientId, req.Msg.Shell); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.ShellInterruptResponse{}), nil
}

func (v *Service) CloseShell(_ context.Context, req *connect.Request[fleetv1.ShellRequest]) (*connect.Response[fleetv1.CloseShellResponse], error) {
	if err := v.Session.CloseShell(req.Msg.Handle, req.Msg.ClientId, req.Msg.Shell); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.CloseShellResponse{}), nil
}

func (v *Service) Start(ctx context.Context, req *connect.Request[fleetv1.StartRequest]) (*connect.Response[fleetv1.StartResponse], error) {
	m := req.Msg
	proc, err := v.Session.Start(ctx, m.Handle, m.ClientId, session.ExecRequest{Argv: m.Argv, Container: m.Container, Env: m.Env, Cwd: m.Cwd})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.StartResponse{Process: proc}), nil
}

func (v *Service) ProcessEvents(ctx context.Context, req *connect.Request[fleetv1.ProcessEventsRequest], stream *connect.ServerStream[fleetv1.ExecResponse]) error {
	m := req.Msg
	_, err := v.Session.ProcessEvents(ctx, m.Handle, m.ClientId, m.Process, int(m.From), func(e session.ProcessEvent) error {
		switch {
		case e.End:
			c := int32(e.Result.ExitCode)
			return stream.Send(&fleetv1.ExecResponse{ExitCode: &c})
		case e.Stream == "stderr":
			return stream.Send(&fleetv1.ExecResponse{Stderr: e.Data})
		default:
			return stream.Send(&fleetv1.ExecResponse{Stdout: e.Data})
		}
	})
	return toConnect(err)
}

func (v *Service) WriteStdin(_ context.Context, req *connect.Request[fleetv1.WriteStdinRequest]) (*connect.Response[fleetv1.WriteStdinResponse], error) {
	m := req.Msg
	if err := v.Session.WriteStdin(m.Handle, m.ClientId, m.Process, m.Data, m.Close); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.WriteStdinResponse{}), nil
}

func (v *Service) Signal(ctx context.Context, req *connect.Request[fleetv1.SignalRequest]) (*connect.Response[fleetv1.SignalResponse], error) {
	m := req.Msg
	if err := v.Session.SignalProcess(ctx, m.Handle, m.ClientId, m.Process, m.Signal); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.SignalResponse{}), nil
}

func (v *Service) Wait(ctx context.Context, req *connect.Request[fleetv1.WaitRequest]) (*connect.Response[fleetv1.WaitResponse], error) {
	m := req.Msg
	if m.Timeout == nil || m.Timeout.AsDuration() < 0 {
		return nil, toConnect(fmt.Errorf("%w: timeout must be given and not negative, e.g. \"5s\"", session.ErrInvalid))
	}
	res, done, err := v.Session.WaitProcess(ctx, m.Handle, m.ClientId, m.Process, m.Timeout.AsDuration())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.WaitResponse{Done: done, ExitCode: int32(res.ExitCode)}), nil
}

func (v *Service) PortForward(_ context.Context, req *connect.Request[fleetv1.PortForwardRequest]) (*connect.Response[fleetv1.PortForwardResponse], error) {
	m := req.Msg
	fid, addr, err := v.Session.PortForward(m.Handle, m.ClientId, int(m.Port))
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.PortForwardResponse{Forward: fid, Address: addr}), nil
}

func (v *Service) ClosePortForward(_ context.Context, req *connect.Request[fleetv1.ClosePortForwardRequest]) (*connect.Response[fleetv1.ClosePortForwardResponse], error) {
	m := req.Msg
	if err := v.Session.ClosePortForward(m.Handle, m.ClientId, m.Forward); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.ClosePortForwardResponse{}), nil
}

func (v *Service) WriteFiles(ctx context.Context, stream *connect.ClientStream[fleetv1.WriteFilesRequest]) (*connect.Response[fleetv1.WriteFilesResponse], error) {
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, toConnect(fmt.Errorf("%w: no message: the first names the handle and the directory", session.ErrInvalid))
	}
	first := stream.Msg()
	if _, err := v.Session.Handle(first.Handle, first.ClientId); err != nil {
		return nil, toConnect(err)
	}
	pr, pw := io.Pipe()
	received := make(chan struct{})
	go func() {
		defer close(received)
		data := first.Tar
		for {
			if _, err := pw.Write(data); err != nil {
				return
			}
			if !stream.Receive() {
				pw.CloseWithError(stream.Err())
				return
			}
			data = stream.Msg().Tar
		}
	}()
	n, err := v.Session.WriteFiles(ctx, first.Handle, first.ClientId, first.Directory, pr)
	// Unblock the receiving goroutine if the sandbox stopped reading, and
	// let it finish: the stream is not to be used once this returns.
	pr.CloseWithError(errors.New("the archive was not read to its end"))
	<-received
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.WriteFilesResponse{Bytes: n}), nil
}

func (v *Service) ReadFiles(ctx context.Context, req *connect.Request[fleetv1.ReadFilesRequest], stream *connect.ServerStream[fleetv1.ReadFilesResponse]) error {
	var mu sync.Mutex
	w := sender{&mu, func(p []byte) error { return stream.Send(&fleetv1.ReadFilesResponse{Tar: p}) }}
	return toConnect(v.Session.ReadFiles(ctx, req.Msg.Handle, req.Msg.ClientId, req.Msg.Paths, w))
}

func (v *Service) Release(ctx context.Context, req *connect.Request[fleetv1.ReleaseRequest]) (*connect.Response[fleetv1.ReleaseResponse], error) {
	annotate(ctx, tracing.Sandbox.String(req.Msg.Handle))
	outcome, err := v.Session.Release(ctx, req.Msg.Handle, req.Msg.ClientId, req.Msg.Reuse)
	if err != nil {
		return nil, toConnect(err)
	}
	annotate(ctx, tracing.Outcome.String(string(outcome)))
	return connect.NewResponse(&fleetv1.ReleaseResponse{Outcome: string(outcome)}), nil
}

func (v *Service) Status(ctx context.Context, _ *connect.Request[fleetv1.StatusRequest]) (*connect.Response[fleetv1.StatusResponse], error) {
	s := v.Session
	pools, err := s.Pools(ctx, nil)
	if err != nil {
		return nil, toConnect(err)
	}
	c := s.Counts()
	out := &fleetv1.StatusResponse{RunId: s.RunID(), Namespace: s.Fleet().Clusters()[0].Namespace(), Tasks: int32(s.TaskCount()),
		Pools: poolsOf(pools), LeaseTtl: durationpb.New(s.Options().LeaseTTL), WarmTtl: durationpb.New(s.Options().WarmTTL),
		Counts: &fleetv1.Counts{Acquired: c.Acquired, Released: c.Released, Expired: c.Expired, Failed: c.Failed, Execs: c.Execs,
			Reused: c.Reused, Quarantined: c.Quarantined}}
	for _, h := range s.Handles() {
		out.Handles = append(out.Handles, v.handleOf(h))
	}
	return connect.NewResponse(out), nil
}

func (v *Service) Close(ctx context.Context, req *connect.Request[fleetv1.CloseRequest]) (*connect.Response[fleetv1.CloseResponse], error) {
	if err := v.Session.MayClose(req.Msg.ClientId); err != nil {
		return nil, toConnect(err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.Session.Fleet().Config().ReadyTimeout.Duration)
	defer cancel()
	if err := v.Shutdown(ctx); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fleetv1.CloseResponse{}), nil
}
