package fleetv1

// ClientKeyHeader carries a client's key: a secret the client makes up
// once and sends on every call. serve binds each client id to the key of
// the first call naming it, so no other caller can act on that client's
// sandboxes by naming its id (PermissionDenied); the first client to call
// a session owns it, and only it may Close it.
const ClientKeyHeader = "Sandbox-Fleet-Client-Key"

// VerdictHeader and ReasonHeader carry, on an error of a failure of the
// sandbox or the cluster, its verdict ("infra") and reason (start, lost,
// timeout, api, ...): an error without them is the transport's. A
// FailedPrecondition error, and a PermissionDenied one for a sandbox held
// by another client, carry a ReasonHeader alone, without a verdict: one of
// the Reason constants below.
const (
	VerdictHeader = "Sandbox-Fleet-Verdict"
	ReasonHeader  = "Sandbox-Fleet-Reason"
)

// Reasons of an error that is no failure of the sandbox.
const (
	ReasonForeign    = "foreign"     // the sandbox is held by another client
	ReasonClosed     = "closed"      // the session is closed
	ReasonFailed     = "failed"      // a file transfer's command failed in the sandbox
	ReasonNotWarming = "not_warming" // a wait for pools that nothing asked to warm
)
