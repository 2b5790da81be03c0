package verdict

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/claim"
)

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{Infrastructure(Exec, errors.New("no shell")), Exec},
		{fmt.Errorf("task t: %w", &claim.Error{Trouble: claim.Trouble{Reason: "ErrImagePull"}}), Start},
		{&claim.LostError{TaskID: "t"}, Lost},
		{&claim.VanishedError{TaskID: "t"}, Lost},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), Timeout},
		{errors.New("connection refused"), API},
		// The reason given wins over what the wrapped error's type says.
		{Infrastructure(Timeout, &claim.LostError{}), Timeout},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if Infrastructure(API, nil) != nil {
		t.Error("Infrastructure(nil) is not nil")
	}
}
