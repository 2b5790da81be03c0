// Package preflight checks that a cluster and namespace can run a sandbox
// fleet before anything is created there: the API server answers, the Agent
// Sandbox API is served at v1beta1 and its controller runs, the namespace exists, the caller holds the
// permissions a run needs, and the optional runtime class and image pull
// secret exist. It only reads; it never creates or changes an object.
package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// Status is the outcome of one check.
type Status string

const (
	Pass Status = "ok"
	// Warn is a problem a run may survive, or a check the caller was not
	// allowed to make.
	Warn Status = "warning"
	// Fail is a problem that stops a run.
	Fail Status = "failed"
)

// Check is one line of the report. Fix says what to do when Status is not Pass.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// Report is the result of Run.
type Report struct {
	Server        string  `json:"server"`
	ServerVersion string  `json:"serverVersion,omitempty"`
	Namespace     string  `json:"namespace"`
	Checks        []Check `json:"checks"`
}

// Failures returns the checks that stop a run.
func (r *Report) Failures() []Check { return r.withStatus(Fail) }

// Warnings returns the checks that did not pass but do not stop a run.
func (r *Report) Warnings() []Check { return r.withStatus(Warn) }

func (r *Report) withStatus(s Status) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == s {
			out = append(out, c)
		}
	}
	return out
}

// Options names what to check beyond the cluster itself.
type Options struct {
	Namespace string
	// RuntimeClass, when set, must exist (e.g. gvisor or kata).
	RuntimeClass string
	// ImagePullSecret, when set, must exist in Namespace.
	ImagePullSecret string
	// Session: the caller is a session (serve), which also records its
	// state in ConfigMaps and whom each claim is held for on the claim.
	Session bool
}

const installFix = "install Agent Sandbox v0.5 or newer with its extensions " +
	"(the controller started with --extensions): https://agent-sandbox.sigs.k8s.io/docs/getting_started/"

// apiResource is a resource a run uses, with the verbs it needs.
type apiResource struct {
	groupVersion string
	resource     string
	// verbs are what every run needs; lacking one fails.
	verbs []string
	// optional are verbs only some runs need, or that make a run faster;
	// lacking one is a warning.
	optional []string
}

// all is every verb the run may use.
func (r apiResource) all() []string { return append(slices.Clip(r.verbs), r.optional...) }

var (
	// delete: teardown deletes a run's Sandboxes directly rather than
	// waiting on the garbage collector.
	sandboxes        = apiResource{sandboxv1beta1.GroupVersion.String(), "sandboxes", []string{"get", "list", "watch"}, []string{"delete"}}
	sandboxTemplates = apiResource{extensionsv1beta1.GroupVersion.String(), "sandboxtemplates", []string{"create", "get", "list", "watch", "delete"}, nil}
	sandboxWarmPools = apiResource{extensionsv1beta1.GroupVersion.String(), "sandboxwarmpools", []string{"create", "get", "list", "watch", "patch", "delete"}, nil}
	sandboxClaims    = apiResource{extensionsv1beta1.GroupVersion.String(), "sandboxclaims", []string{"create", "get", "list", "watch", "delete"}, nil}
	// delete: teardown deletes a run's Pods once their Sandbox is gone.
	pods = apiResource{"v1", "pods", nil, []string{"get", "list", "watch", "delete"}}
	// get: exec over WebSocket opens with a GET; create: over SPDY.
	podsExec = apiResource{"v1", "pods/exec", nil, []string{"create", "get"}}
	// leases hold a driver's heartbeat (package heartbeat).
	leases = apiResource{"coordination.k8s.io/v1", "leases", []string{"create", "get", "list", "update", "delete"}, nil}

	// agentSandboxAPI is what must be served: the four Agent Sandbox kinds.
	agentSandboxAPI = []apiResource{sandboxes, sandboxTemplates, sandboxWarmPools, sandboxClaims}
	// permissions are what the caller must be allowed in the namespace.
	permissions = []apiResource{sandboxTemplates, sandboxWarmPools, sandboxClaims, sandboxes, pods, podsExec, leases}
	// sessionState is where a session records its state (package
	// sessionstate).
	sessionState = apiResource{"v1", "configmaps", []string{"create", "get", "list", "update", "delete"}, nil}
)

// needed is what the caller must be allowed, by opts. A session also
// records its state, and patches claims to record whom each is held for.
func needed(opts Options) []apiResource {
	if !opts.Session {
		return permissions
	}
	out := slices.Clone(permissions)
	for i := range out {
		if out[i].resource == sandboxClaims.resource {
			out[i].verbs = append(slices.Clip(out[i].verbs), "patch")
		}
	}
	return append(out, sessionState)
}

// Run checks the cluster behind kc. server is the API server's address, for
// the report. A failure to reach the server ends the checks early.
func Run(ctx context.Context, kc kubernetes.Interface, server string, opts Options) Report {
	r := Report{Server: server, Namespace: opts.Namespace}
	v, err := kc.Discovery().ServerVersion()
	if err != nil {
		r.Checks = append(r.Checks, Check{Name: "reachable", Status: Fail,
			Detail: fmt.Sprintf("cannot reach the API server at %s: %v", server, err),
			Fix:    "check --kubeconfig and --context, and that the cluster is up"})
		return r
	}
	r.ServerVersion = v.GitVersion
	r.Checks = append(r.Checks, Check{Name: "reachable", Status: Pass, Detail: server + " " + v.GitVersion})

	r.Checks = append(r.Checks, checkAPI(kc)...)
	r.Checks = append(r.Checks, checkController(ctx, kc)...)
	r.Checks = append(r.Checks, checkNamespace(ctx, kc, opts.Namespace))
	r.Checks = append(r.Checks, checkPermissions(ctx, kc, opts.Namespace, needed(opts))...)
	if opts.RuntimeClass != "" {
		r.Checks = append(r.Checks, checkRuntimeClass(ctx, kc, opts.RuntimeClass))
	}
	if opts.ImagePullSecret != "" {
		r.Checks = append(r.Checks, checkPullSecret(ctx, kc, opts.Namespace, opts.ImagePullSecret))
	}
	r.Checks = append(r.Checks, checkNodes(ctx, kc))
	return r
}

// checkAPI uses discovery rather than reading CRDs, because discovery is open
// to every authenticated user and says exactly what is served.
func checkAPI(kc kubernetes.Interface) []Check {
	groups, err := kc.Discovery().ServerGroups()
	if err != nil {
		return []Check{{Name: "agent-sandbox-api", Status: Fail,
			Detail: fmt.Sprintf("listing API groups: %v", err), Fix: "retry; check the API server's health"}}
	}
	served := map[string][]string{} // group -> versions
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			served[g.Name] = append(served[g.Name], v.Version)
		}
	}
	var checks []Check
	resources := map[string][]string{} // group/version -> resources
	for _, res := range agentSandboxAPI {
		group, version, _ := strings.Cut(res.groupVersion, "/")
		name := "crd/" + res.resource + "." + group
		switch {
		case len(served[group]) == 0:
			checks = append(checks, Check{Name: name, Status: Fail,
				Detail: "not installed: the API server does not serve " + group, Fix: installFix})
			continue
		case !slices.Contains(served[group], version):
			checks = append(checks, Check{Name: name, Status: Fail,
				Detail: fmt.Sprintf("%s serves %s but not %s", group, strings.Join(served[group], ","), version),
				Fix:    "upgrade Agent Sandbox to v0.5 or newer, which serves " + version})
			continue
		}
		if _, ok := resources[res.groupVersion]; !ok {
			list, err := kc.Discovery().ServerResourcesForGroupVersion(res.groupVersion)
			if err != nil {
				checks = append(checks, Check{Name: name, Status: Fail,
					Detail: fmt.Sprintf("discovering %s: %v", res.groupVersion, err), Fix: installFix})
				continue
			}
			for _, r := range list.APIResources {
				resources[res.groupVersion] = append(resources[res.groupVersion], r.Name)
			}
		}
		if !slices.Contains(resources[res.groupVersion], res.resource) {
			checks = append(checks, Check{Name: name, Status: Fail,
				Detail: res.groupVersion + " is served but has no " + res.resource, Fix: installFix})
			continue
		}
		checks = append(checks, Check{Name: name, Status: Pass, Detail: res.groupVersion + " served"})
	}
	return checks
}

func checkNamespace(ctx context.Context, kc kubernetes.Interface, ns string) Check {
	name := "namespace"
	_, err := kc.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil:
		return Check{Name: name, Status: Pass, Detail: ns}
	case apierrors.IsNotFound(err):
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("namespace %q does not exist", ns),
			Fix: fmt.Sprintf("create it with `kubectl create namespace %s`, or pick another with -n", ns)}
	case apierrors.IsForbidden(err):
		return Check{Name: name, Status: Warn, Detail: fmt.Sprintf("not allowed to read namespace %q, so its existence is unchecked", ns)}
	default:
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("reading namespace %q: %v", ns, err), Fix: "retry; check the API server's health"}
	}
}

// checkPermissions asks the API server, with one SelfSubjectAccessReview per
// verb and resource, whether the caller may do what a run does. The reviews
// run concurrently: on a remote cluster twenty sequential round trips are
// noticeable.
func checkPermissions(ctx context.Context, kc kubernetes.Interface, ns string, permissions []apiResource) []Check {
	type answer struct {
		allowed bool
		err     error
	}
	answers := make([][]answer, len(permissions))
	var wg sync.WaitGroup
	for i, res := range permissions {
		answers[i] = make([]answer, len(res.all()))
		group, _, _ := strings.Cut(res.groupVersion, "/")
		if !strings.Contains(res.groupVersion, "/") {
			group = ""
		}
		resource, subresource, _ := strings.Cut(res.resource, "/")
		for j, verb := range res.all() {
			wg.Go(func() {
				review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: subresource,
					}}}
				got, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
				if err != nil {
					answers[i][j] = answer{err: err}
					return
				}
				answers[i][j] = answer{allowed: got.Status.Allowed}
			})
		}
	}
	wg.Wait()

	checks := make([]Check, 0, len(permissions))
	for i, res := range permissions {
		name := "rbac/" + res.resource
		verbs := res.all()
		var missing []string
		var errs []string
		status := Warn
		for j, a := range answers[i] {
			switch {
			case a.err != nil:
				errs = append(errs, fmt.Sprintf("%s: %v", verbs[j], a.err))
			case !a.allowed:
				missing = append(missing, verbs[j])
				if slices.Contains(res.verbs, verbs[j]) {
					status = Fail
				}
			}
		}
		switch {
		case len(errs) > 0:
			checks = append(checks, Check{Name: name, Status: Warn,
				Detail: "could not review access: " + strings.Join(errs, "; ")})
		case len(missing) > 0:
			checks = append(checks, Check{Name: name, Status: status,
				Detail: fmt.Sprintf("not allowed to %s %s in namespace %q", strings.Join(missing, ", "), res.resource, ns),
				Fix: fmt.Sprintf("ask a cluster admin for a Role in %q granting %s on %s (see `kubectl auth can-i --list -n %s`)",
					ns, strings.Join(missing, ", "), res.resource, ns)})
		default:
			checks = append(checks, Check{Name: name, Status: Pass, Detail: strings.Join(verbs, ",")})
		}
	}
	return checks
}

func checkRuntimeClass(ctx context.Context, kc kubernetes.Interface, rc string) Check {
	name := "runtimeclass/" + rc
	_, err := kc.NodeV1().RuntimeClasses().Get(ctx, rc, metav1.GetOptions{})
	switch {
	case err == nil:
		return Check{Name: name, Status: Pass}
	case apierrors.IsNotFound(err):
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("runtime class %q does not exist", rc),
			Fix: "list the cluster's runtime classes with `kubectl get runtimeclass`, or ask a cluster admin to install it"}
	case apierrors.IsForbidden(err):
		return Check{Name: name, Status: Warn, Detail: fmt.Sprintf("not allowed to read runtime class %q, so its existence is unchecked", rc)}
	default:
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("reading runtime class %q: %v", rc, err), Fix: "retry; check the API server's health"}
	}
}

func checkPullSecret(ctx context.Context, kc kubernetes.Interface, ns, secret string) Check {
	name := "secret/" + secret
	s, err := kc.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	switch {
	case err == nil && s.Type != corev1.SecretTypeDockerConfigJson && s.Type != corev1.SecretTypeDockercfg:
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("secret %q has type %s, not an image pull secret", secret, s.Type),
			Fix: fmt.Sprintf("create one with `kubectl create secret docker-registry %s -n %s ...`", secret, ns)}
	case err == nil:
		return Check{Name: name, Status: Pass, Detail: string(s.Type)}
	case apierrors.IsNotFound(err):
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("image pull secret %q does not exist in namespace %q", secret, ns),
			Fix: fmt.Sprintf("create it with `kubectl create secret docker-registry %s -n %s ...`", secret, ns)}
	case apierrors.IsForbidden(err):
		// Pods can use a secret their creator cannot read.
		return Check{Name: name, Status: Warn, Detail: fmt.Sprintf("not allowed to read secret %q, so its existence is unchecked", secret)}
	default:
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("reading secret %q: %v", secret, err), Fix: "retry; check the API server's health"}
	}
}

// checkNodes warns when no node can take a sandbox; it cannot fail a run,
// since autoscaled clusters legitimately start with none.
func checkNodes(ctx context.Context, kc kubernetes.Interface) Check {
	name := "nodes"
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return Check{Name: name, Status: Warn, Detail: fmt.Sprintf("cannot list nodes (%v), so capacity is unchecked", apiReason(err))}
	}
	ready := 0
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			continue
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if ready == 0 {
		return Check{Name: name, Status: Warn, Detail: fmt.Sprintf("none of %d nodes is Ready and schedulable", len(nodes.Items)),
			Fix: "sandboxes will stay Pending until a node is Ready; check `kubectl get nodes`"}
	}
	return Check{Name: name, Status: Pass, Detail: fmt.Sprintf("%d of %d Ready and schedulable", ready, len(nodes.Items))}
}

func apiReason(err error) string {
	if reason := apierrors.ReasonForError(err); reason != metav1.StatusReasonUnknown {
		return strings.ToLower(string(reason))
	}
	return err.Error()
}
