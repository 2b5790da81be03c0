package verdict

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{Infrastructure(Exec, errors.New("no shell")), Exec},
		{fmt.Errorf("task t: %w", &StartError{Reason: "ErrImagePull"}), Start},
		{fmt.Errorf("warming: %w", WarmError{"pool-a": errors.New("no node has room")}), Start},
		{&LostError{TaskID: "t"}, Lost},
		{&VanishedError{TaskID: "t"}, Lost},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), Timeout},
		{errors.New("connection refused"), API},
		// The reason given wins over what the wrapped error's type says.
		{Infrastructure(Timeout, &LostError{}), Timeout},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if Infrastructure(API, nil) != nil {
		t.Error("Infrastructure(nil) is not nil")
	}
}
