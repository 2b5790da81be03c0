// Package webhook decides what SandboxPolicies do to sandbox Pods and
// templates: which policies govern a namespace and in what order, what
// they refuse, how they change a Pod, and when the API server needs to
// call the webhook at all. Everything here is a pure function of plain
// objects — no client, no server — so asrl-webhook's decisions are
// table-tested and fuzzed without one, and an admin's own tooling (a
// dry-run report, another admission webhook, a CI check of templates) can
// make the same decisions. The server, its handlers, counts and metrics
// are asrl-webhook's own.
//
// # Which policies govern
//
// Select picks, from every SandboxPolicy, those whose namespace selector
// matches a namespace's labels, highest priority first: a Set. What
// policies allow and deny adds up over the set; a single-valued setting
// (runtime class, scheduler) comes from the highest priority that sets
// it, and two policies of that priority that set it differently are
// refused as a Denial rather than chosen between by chance.
//
// # What is refused
//
// Check refuses a Pod's or template's spec that a policy does not allow:
// privileged or host-namespaced containers, host paths and ports,
// Unconfined profiles, added capabilities, unsafe sysctls, service
// account tokens, images outside the allowed registries. A Denial names
// the policy, the field and what the policy would have to allow.
// CheckEphemeral, CheckResize and CheckSecret judge debug containers,
// in-place resizes and token Secrets the same way.
//
// # How a Pod changes
//
// Mutate applies a Set to a sandbox Pod as it is created: images
// rewritten to mirrors (the original kept in an annotation), the run-id
// label, security defaults, runtime class and scheduler, capped limits,
// colocation of a pool's Pods. It returns what it changed, in words.
// MutateTemplate does the same to a SandboxTemplate's Pod template,
// MutateUpdate to an update of a Pod, and AddNodeCacheAffinity prefers the
// nodes that already hold most of a Pod's image layers.
//
// # When the webhook is called
//
// CallCondition is the CEL match condition under which the API server
// sends a Pod to the webhook: false only when Mutate would neither change
// nor refuse it — a Pod from a template the webhook already mutated — so
// most sandbox Pods cost the API server no call. It errs toward calling.
package webhook
