package serve

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// KubeAuth admits a caller by the Kubernetes ServiceAccount token it sends
// as its bearer token: the API server reviews it (a TokenReview, for
// Audience), and only the accounts Allowed may call. It is how serve runs
// in a cluster, for rollout workers in Pods of their own.
type KubeAuth struct {
	Reviews authenticationv1client.TokenReviewInterface
	// Audience the tokens must be meant for: a Pod's projected token of
	// this audience, not its API token, so that serve cannot replay what
	// it is sent against the API server.
	Audience string
	// Allowed are the accounts that may call, as namespace/name, or
	// namespace/* for every account of a namespace.
	Allowed []string

	mu     sync.Mutex
	review map[[sha256.Size]byte]reviewed
}

// reviewed is a review's outcome, kept a while: a call per rollout step
// must not cost a TokenReview each.
type reviewed struct {
	user  string
	err   error
	until time.Time
}

const (
	// reviewTTL is how long a review is trusted; a revoked token (its
	// Pod deleted) is refused at most this late.
	reviewTTL = 30 * time.Second
	// maxReviews bounds the reviews kept.
	maxReviews = 10000
)

// DefaultAudience is the audience serve's callers' tokens are for unless
// --token-audience says otherwise.
const DefaultAudience = "sandbox-fleet"

// ParseAccount checks an allowed account, namespace/name or namespace/*.
func ParseAccount(s string) error {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--allow-service-account %q: give NAMESPACE/NAME, or NAMESPACE/* for every account of a namespace", s)
	}
	return nil
}

// allowed reports whether the user a TokenReview names is one of the
// accounts allowed.
func allowed(user string, accounts []string) bool {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return false
	}
	ns, name, ok := strings.Cut(rest, ":")
	if !ok {
		return false
	}
	return slices.Contains(accounts, ns+"/"+name) || slices.Contains(accounts, ns+"/*")
}

// check says why token may not call, if it may not: a Unauthenticated or
// PermissionDenied error.
func (k *KubeAuth) check(ctx context.Context, token string) *authError {
	if token == "" {
		return &authError{http.StatusUnauthorized, "unauthenticated", "a bearer token is required: send Authorization: Bearer <your Pod's ServiceAccount token of audience " + k.Audience + ">"}
	}
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	k.mu.Lock()
	r, ok := k.review[key]
	k.mu.Unlock()
	if !ok || now.After(r.until) {
		var keep bool
		r, keep = k.ask(ctx, token)
		if keep {
			r.until = now.Add(reviewTTL)
			k.mu.Lock()
			if k.review == nil || len(k.review) >= maxReviews {
				k.review = map[[sha256.Size]byte]reviewed{}
			}
			k.review[key] = r
			k.mu.Unlock()
		}
	}
	if r.err != nil {
		return &authError{http.StatusUnauthorized, "unauthenticated", r.err.Error()}
	}
	if !allowed(r.user, k.Allowed) {
		return &authError{http.StatusForbidden, "permission_denied", fmt.Sprintf(
			"%s may not use this session: serve allows %s (--allow-service-account)", r.user, strings.Join(k.Allowed, ", "))}
	}
	return nil
}

// ask has the API server review token; keep is false when it could not,
// and the next call asks again.
func (k *KubeAuth) ask(ctx context.Context, token string) (r reviewed, keep bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr, err := k.Reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token: token, Audiences: []string{k.Audience}}}, metav1.CreateOptions{})
	switch {
	case err != nil:
		return reviewed{err: fmt.Errorf("the API server could not review the token: %v", err)}, false
	case !tr.Status.Authenticated:
		why := tr.Status.Error
		if why == "" {
			why = "not authenticated"
		}
		return reviewed{err: fmt.Errorf("the token was refused (%s): send a ServiceAccount token of audience %q", why, k.Audience)}, true
	}
	return reviewed{user: tr.Status.User.Username}, true
}

// authError is a refused call, as Connect's JSON error.
type authError struct {
	status        int
	code, message string
}

// Wrap lets through only the calls of allowed accounts.
func (k *KubeAuth) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if err := k.check(r.Context(), token); err != nil {
			refuse(w, err.status, err.code, err.message)
			return
		}
		next.ServeHTTP(w, r)
	})
}
