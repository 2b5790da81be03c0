package webhook

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

func TestEntryMayBeUnbacked(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		name     string
		admitted time.Time
		want     bool
	}{
		{"a policy's own entry", time.Time{}, true},
		{"a change admitted a moment ago", now.Add(-time.Second), false},
		{"a change admitted just within the storage lag", now.Add(-storageLag), false},
		{"a change admitted past the storage lag", now.Add(-storageLag - time.Second), true},
	} {
		if got := (entryRef{admitted: tt.admitted}).mayBeUnbacked(now); got != tt.want {
			t.Errorf("%s: may be unbacked %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestUnbacked(t *testing.T) {
	ref := PolicyRef{Name: "rl", UID: "uid-rl", Generation: 3}
	stored := func(uid string, generation int64) *v1alpha1.SandboxPolicy {
		return &v1alpha1.SandboxPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rl", UID: k8stypes.UID("uid-" + uid), Generation: generation}}
	}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "sandbox-fleet.io", Resource: "sandboxpolicies"}, "rl")
	for _, tt := range []struct {
		name string
		live *v1alpha1.SandboxPolicy
		err  error
		want bool
	}{
		{"the policy is stored at the entry's generation", stored("rl", 3), nil, false},
		{"the policy is stored at a newer generation", stored("rl", 4), nil, false},
		{"the change was never stored", stored("rl", 2), nil, true},
		{"no policy has the name", &v1alpha1.SandboxPolicy{}, notFound, true},
		{"another policy has the name", stored("other", 3), nil, true},
		{"the read failed", &v1alpha1.SandboxPolicy{}, errors.New("connection refused"), false},
		{"the read timed out", &v1alpha1.SandboxPolicy{}, apierrors.NewTimeoutError("slow", 1), false},
	} {
		if got := unbacked(ref, tt.live, tt.err); got != tt.want {
			t.Errorf("%s: unbacked %v, want %v", tt.name, got, tt.want)
		}
	}
}
