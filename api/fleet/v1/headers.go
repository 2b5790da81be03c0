package fleetv1

// ClientKeyHeader carries a client's key: a secret the client makes up
// once and sends on every call. serve binds each client id to the key of
// the first call naming it, so no other caller can act on that client's
// sandboxes by naming its id (PermissionDenied); the first client to call
// a session owns it, and only it may Close it.
const ClientKeyHeader = "Sandbox-Fleet-Client-Key"

// VerdictHeader and ReasonHeader carry, on an error of a failure of the
// sandbox or the cluster, its verdict ("infra") and reason (start, lost,
// timeout, api, ...): an error without them is the transport's.
const (
	VerdictHeader = "Sandbox-Fleet-Verdict"
	ReasonHeader  = "Sandbox-Fleet-Reason"
)
