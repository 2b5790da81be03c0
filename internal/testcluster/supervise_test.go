package testcluster

import (
	"testing"
	"time"
)

// A component that keeps exiting waits longer each time, up to a cap; one
// that stayed up a while starts over.
func TestNextBackoff(t *testing.T) {
	for _, tt := range []struct {
		last, ran, want time.Duration
	}{
		{0, time.Second, time.Second},
		{0, time.Hour, time.Second},
		{time.Second, 5 * time.Second, 2 * time.Second},
		{8 * time.Second, 0, 16 * time.Second},
		{16 * time.Second, time.Second, 30 * time.Second},
		{30 * time.Second, time.Second, 30 * time.Second},
		{30 * time.Second, time.Minute, time.Second},
	} {
		if got := nextBackoff(tt.last, tt.ran); got != tt.want {
			t.Errorf("nextBackoff(%s, ran %s) = %s, want %s", tt.last, tt.ran, got, tt.want)
		}
	}
}
