package session

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A release stops the calls in flight on the handle and returns only once
// they ended; anything begun after it is refused as the sandbox's being
// released, so nothing of a lease outlives it (a recycled sandbox's next
// lease included).
func TestReleaseEndsTheCallsInFlight(t *testing.T) {
	var tl tools
	ctx, end, err := tl.begin(context.Background(), "sb")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan time.Time, 1)
	go func() {
		<-ctx.Done() // the command, stopped by its context
		time.Sleep(50 * time.Millisecond)
		ended <- time.Now()
		end()
	}()
	tl.closeAll(context.Background())
	returned := time.Now()
	select {
	case at := <-ended:
		if at.After(returned) {
			t.Errorf("release returned before the call in flight ended")
		}
	default:
		t.Fatal("release returned while the call in flight still ran")
	}
	if _, _, err := tl.begin(context.Background(), "sb"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a call begun after the release: %v, want ErrNotFound", err)
	}
}
