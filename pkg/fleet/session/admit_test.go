package session

import (
	"errors"
	"testing"
)

// Each client id is bound to the key of the first call naming it; the
// first client owns the session.
func TestAdmit(t *testing.T) {
	s := &Session{keys: map[string]string{}, dirty: make(chan struct{}, 1)}
	for _, tc := range []struct {
		id, key string
		want    bool
	}{
		{"a", "ka", true},
		{"a", "ka", true},
		{"a", "other", false},
		{"a", "", false},
		{"b", "", true},
		{"b", "", true},
		{"b", "kb", false},
		{"", "anything", true},
	} {
		if err := s.Admit(tc.id, tc.key); (err == nil) != tc.want || err != nil && !errors.Is(err, ErrForeign) {
			t.Errorf("Admit(%q, %q) = %v, want allowed %v", tc.id, tc.key, err, tc.want)
		}
	}
	if err := s.MayClose("b"); !errors.Is(err, ErrForeign) {
		t.Errorf("Close by a client that is not the owner: %v", err)
	}
	if err := s.MayClose("a"); err != nil {
		t.Errorf("Close by the owner: %v", err)
	}
	if len(s.dirty) != 1 {
		t.Errorf("binding clients did not ask for them to be recorded")
	}
}
