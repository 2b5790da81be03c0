package serve

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
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
	// ReviewsPerSecond and ReviewBurst bound the TokenReviews one source
	// (a remote address) may cause with tokens serve has not reviewed
	// lately: made-up tokens cost the API server nothing past them. Zero:
	// DefaultReviewsPerSecond and DefaultReviewBurst.
	ReviewsPerSecond float64
	ReviewBurst      int
	// MaxReviewsInFlight bounds the reviews asked at once, from every
	// source together; a call waits for its turn. Zero: DefaultReviewsInFlight.
	MaxReviewsInFlight int

	mu       sync.Mutex
	review   map[[sha256.Size]byte]reviewed
	sources  map[string]*rate.Limiter
	inFlight chan struct{}
}

// The bounds on TokenReviews unless KubeAuth's fields say otherwise: a
// rollout worker's Pod reviews its one token every reviewTTL; 20 at once,
// then 5 a second, lets a Pod of many workers with tokens of their own
// start, and a flood of made-up tokens cost the API server 5 a second.
const (
	DefaultReviewsPerSecond = 5
	DefaultReviewBurst      = 20
	DefaultReviewsInFlight  = 8
	// maxSources bounds the per-source limiters kept.
	maxSources = 10000
)

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

// ParseAccount checks an allowed account, namespace/name or namespace/*,
// each a name Kubernetes could give: a placeholder left in a manifest
// (manifests/serve's TRAINER_NAMESPACE) is refused, not served.
func ParseAccount(s string) error {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--allow-service-account %q: give NAMESPACE/NAME, or NAMESPACE/* for every account of a namespace", s)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return fmt.Errorf("--allow-service-account %q: %q is no namespace name (%s): name the namespace the callers' Pods run in", s, ns, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(name); name != "*" && len(msgs) > 0 {
		return fmt.Errorf("--allow-service-account %q: %q is no ServiceAccount name (%s)", s, name, strings.Join(msgs, "; "))
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

// limiter is source's bound on reviews.
func (k *KubeAuth) limiter(source string) *rate.Limiter {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sources == nil || len(k.sources) >= maxSources {
		k.sources = map[string]*rate.Limiter{}
	}
	l, ok := k.sources[source]
	if !ok {
		l = rate.NewLimiter(rate.Limit(cmp.Or(k.ReviewsPerSecond, DefaultReviewsPerSecond)), cmp.Or(k.ReviewBurst, DefaultReviewBurst))
		k.sources[source] = l
	}
	return l
}

// turn waits for a review's turn among those in flight; done ends it.
func (k *KubeAuth) turn(ctx context.Context) (done func(), err error) {
	k.mu.Lock()
	if k.inFlight == nil {
		k.inFlight = make(chan struct{}, cmp.Or(k.MaxReviewsInFlight, DefaultReviewsInFlight))
	}
	slots := k.inFlight
	k.mu.Unlock()
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// remember keeps r for token's key, dropping expired reviews first when
// the cache is full, and all of them if none has expired.
func (k *KubeAuth) remember(key [sha256.Size]byte, r reviewed, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.review == nil {
		k.review = map[[sha256.Size]byte]reviewed{}
	}
	if len(k.review) >= maxReviews {
		maps.DeleteFunc(k.review, func(_ [sha256.Size]byte, v reviewed) bool { return now.After(v.until) })
	}
	if len(k.review) >= maxReviews {
		clear(k.review)
	}
	k.review[key] = r
}

// check says why token, sent from source, may not call, if it may not: a
// Unauthenticated, PermissionDenied or ResourceExhausted error.
func (k *KubeAuth) check(ctx context.Context, token, source string) *authError {
	if token == "" {
		return &authError{http.StatusUnauthorized, "unauthenticated", "a bearer token is required: send Authorization: Bearer <your Pod's ServiceAccount token of audience " + k.Audience + ">"}
	}
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	k.mu.Lock()
	r, ok := k.review[key]
	k.mu.Unlock()
	if !ok || now.After(r.until) {
		if !k.limiter(source).Allow() {
			return &authError{http.StatusTooManyRequests, "resource_exhausted", fmt.Sprintf(
				"too many new tokens from %s: serve reviews at most %g a second per caller; send the same token again, or retry later",
				source, cmp.Or(k.ReviewsPerSecond, DefaultReviewsPerSecond))}
		}
		done, err := k.turn(ctx)
		if err != nil {
			return &authError{http.StatusServiceUnavailable, "unavailable", "waiting to review the token: " + err.Error()}
		}
		var keep bool
		r, keep = k.ask(ctx, token)
		done()
		if keep {
			r.until = now.Add(reviewTTL)
			k.remember(key, r, now)
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
	}
	return judge(tr.Status, k.Audience), true
}

// judge is what a TokenReview's status says of a caller: its user, or
// why it is refused. A token the API server authenticated but not for
// audience — an authenticator that ignores audiences said yes — is
// refused: serve must not accept what was meant for another service.
func judge(st authenticationv1.TokenReviewStatus, audience string) reviewed {
	switch {
	case !st.Authenticated:
		why := st.Error
		if why == "" {
			why = "not authenticated"
		}
		return reviewed{err: fmt.Errorf("the token was refused (%s): send a ServiceAccount token of audience %q", why, audience)}
	case !slices.Contains(st.Audiences, audience):
		return reviewed{err: fmt.Errorf("the token is not for audience %q (it is for %v): send a ServiceAccount token of audience %q", audience, st.Audiences, audience)}
	}
	return reviewed{user: st.User.Username}
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
		source, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			source = r.RemoteAddr
		}
		if err := k.check(r.Context(), token, source); err != nil {
			refuse(w, err.status, err.code, err.message)
			return
		}
		next.ServeHTTP(w, r)
	})
}
