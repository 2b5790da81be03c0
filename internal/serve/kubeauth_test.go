package serve

import (
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// What a TokenReview's status admits: an authenticated token for serve's
// audience; not one the API server refused, and not one an authenticator
// that ignores audiences accepted for another service.
func TestJudge(t *testing.T) {
	user := authenticationv1.UserInfo{Username: "system:serviceaccount:rl:trainer"}
	for _, tt := range []struct {
		name    string
		status  authenticationv1.TokenReviewStatus
		user    string
		wantErr string
	}{
		{"for serve", authenticationv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{"sandbox-fleet"}}, user.Username, ""},
		{"for serve among others", authenticationv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{"x", "sandbox-fleet"}}, user.Username, ""},
		{"audience-agnostic", authenticationv1.TokenReviewStatus{Authenticated: true, User: user}, "", `not for audience "sandbox-fleet"`},
		{"for the API server", authenticationv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{"https://kubernetes.default.svc"}}, "", "not for audience"},
		{"refused", authenticationv1.TokenReviewStatus{Error: "token expired"}, "", "refused (token expired)"},
		{"refused, no reason", authenticationv1.TokenReviewStatus{}, "", "refused (not authenticated)"},
	} {
		got := judge(tt.status, "sandbox-fleet")
		if got.user != tt.user || (got.err == nil) != (tt.wantErr == "") || (got.err != nil && !strings.Contains(got.err.Error(), tt.wantErr)) {
			t.Errorf("%s: user %q, err %v; want %q, %q", tt.name, got.user, got.err, tt.user, tt.wantErr)
		}
	}
}
