package kube

import (
	"context"
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Transient reports whether a request that failed with err may succeed if
// sent again: the connection dropped or was refused (an API server
// restarting or stalled), the request timed out, or the server said to
// come back later. A write that failed so may still have been done; retry
// it only when a second try can tell (a fixed name, then AlreadyExists).
func Transient(err error) bool {
	var netErr net.Error
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller's own deadline is not the server's trouble.
		return false
	case utilnet.IsProbableEOF(err), utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err),
		utilnet.IsHTTP2ConnectionLost(err):
		return true
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err):
		return true
	case errors.As(err, &netErr) && netErr.Timeout():
		return true
	}
	return false
}
