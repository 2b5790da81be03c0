package interrupt

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// Context is the verb's context for Handle to cancel. The requests in
// flight when it is canceled fail, and client-go logs each failure as an
// error ("Unexpected error when reading response body" err="context
// canceled"); the context's logger keeps those out of the terminal, which
// Handle has told once, plainly, that the verb is stopping. Every other
// record goes to klog as before.
func Context(parent context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	logger := klog.FromContext(parent)
	// The inner sink skips quietOnCancel's frame to name the caller's line.
	inner := logger.WithCallDepth(1).GetSink()
	return klog.NewContext(ctx, logger.WithSink(quietOnCancel{LogSink: inner, ctx: ctx})), cancel
}

// quietOnCancel drops the errors that ctx's cancellation caused.
type quietOnCancel struct {
	logr.LogSink
	ctx context.Context
}

func (q quietOnCancel) Error(err error, msg string, keysAndValues ...any) {
	if q.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return
	}
	q.LogSink.Error(err, msg, keysAndValues...)
}

func (q quietOnCancel) WithValues(keysAndValues ...any) logr.LogSink {
	return quietOnCancel{LogSink: q.LogSink.WithValues(keysAndValues...), ctx: q.ctx}
}

func (q quietOnCancel) WithName(name string) logr.LogSink {
	return quietOnCancel{LogSink: q.LogSink.WithName(name), ctx: q.ctx}
}

func (q quietOnCancel) WithCallDepth(depth int) logr.LogSink {
	if s, ok := q.LogSink.(logr.CallDepthLogSink); ok {
		return quietOnCancel{LogSink: s.WithCallDepth(depth), ctx: q.ctx}
	}
	return q
}
