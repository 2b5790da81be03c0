package session

import (
	"errors"
	"testing"
	"time"
)

// Each client id is bound to the key of the first call naming it; the
// first client owns the session.
func TestAdmit(t *testing.T) {
	s := &Session{keys: map[string]string{}, clients: map[string]time.Time{}, handles: map[string]*Handle{},
		dirty: make(chan struct{}, 1)}
	// a and b hold leases; c's ran out, and d's, but d holds a sandbox.
	for _, id := range []string{"a", "b"} {
		s.clients[id] = time.Now().Add(time.Minute)
	}
	s.clients["c"], s.clients["d"] = time.Now().Add(-time.Second), time.Now().Add(-time.Second)
	s.handles["claim-1"] = &Handle{Client: "d"}
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
		{"c", "kc", true},
		{"c", "restarted", true}, // its holder is gone: the id goes to the new key
		{"d", "kd", true},
		{"d", "restarted", false}, // its holder still has a sandbox
	} {
		if err := s.Admit(tc.id, tc.key); (err == nil) != tc.want || err != nil && !errors.Is(err, ErrForeign) {
			t.Errorf("Admit(%q, %q) = %v, want allowed %v", tc.id, tc.key, err, tc.want)
		}
	}
	// Once the new holder renews its lease, the id is its own.
	s.clients["c"] = time.Now().Add(time.Minute)
	if err := s.Admit("c", "kc"); !errors.Is(err, ErrForeign) {
		t.Errorf("the old key of a client id taken over: %v, want refused", err)
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
