package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func TestLine(t *testing.T) {
	for _, tt := range []struct {
		p    fleet.Progress
		want string
	}{
		{fleet.Progress{Total: 40, Warming: 8}, "tasks 0/40 · running 0 · warming 8 images · 0s"},
		{fleet.Progress{Total: 40, Done: 10, Failed: 1, Running: 8, Elapsed: 5 * time.Second},
			"tasks 10/40 (1 failed) · running 8 · 2.0/s · ETA 15s · 5s"},
		{fleet.Progress{Total: 4, Done: 4, Elapsed: 2 * time.Second}, "tasks 4/4 · running 0 · 2.0/s · 2s"},
		{fleet.Progress{Total: 40, Running: 8, Warming: 2, Pulling: nodecache.Pull{Done: 2254857830, Size: 5690831667, BytesPerSecond: 180 << 20}, Elapsed: 9 * time.Second},
			"tasks 0/40 · running 8 · warming 2 images · pulling 2.1/5.3 GiB (180 MiB/s, ~18s) · 9s"},
		{fleet.Progress{Total: 40, Running: 8, Pulling: nodecache.Pull{Done: 2 << 20, Size: 24 << 20, BytesPerSecond: 4 << 20}, Elapsed: 9 * time.Second},
			"tasks 0/40 · running 8 · pulling 2.0/24.0 MiB (4 MiB/s, ~6s) · 9s"},
		{fleet.Progress{Total: 40, Running: 8, Pulling: nodecache.Pull{Done: 30, Size: 30}, Elapsed: 9 * time.Second},
			"tasks 0/40 · running 8 · 9s"},
	} {
		if got := Line(tt.p); got != tt.want {
			t.Errorf("Line(%+v) = %q, want %q", tt.p, got, tt.want)
		}
	}
}

// Off a terminal every update is a line of its own, with no control
// characters; on one the line is rewritten in place.
func TestPrinter(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		var buf bytes.Buffer
		p := Start(&buf, terminal, 10*time.Millisecond, func() fleet.Progress { return fleet.Progress{Total: 2, Done: 1} })
		time.Sleep(600 * time.Millisecond)
		p.Stop()
		out := buf.String()
		switch {
		case !terminal && (strings.ContainsAny(out, "\r\033") || strings.Count(out, "\n") < 2):
			t.Errorf("piped output %q: want plain lines", out)
		case terminal && (strings.Count(out, "\r\033[K") < 2 || strings.Count(out, "\n") != 1):
			t.Errorf("terminal output %q: want one line rewritten in place", out)
		}
	}
}
