package output

import (
	"bytes"
	"testing"
)

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		n    int
		noun string
		want string
	}{
		{1, "cluster", "1 cluster"},
		{0, "cluster", "0 clusters"},
		{3, "sandbox", "3 sandboxes"},
		{2, "match", "2 matches"},
		{1, "sandbox", "1 sandbox"},
	} {
		if got := Count(tt.n, tt.noun); got != tt.want {
			t.Errorf("Count(%d, %q) = %q, want %q", tt.n, tt.noun, got, tt.want)
		}
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB",
		100 << 20: "100 MiB", 3 << 30: "3 GiB", 1<<40 + 1<<39: "1.5 TiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// Colours are off unless the output is a terminal.
func TestPalette(t *testing.T) {
	if got := Colors(&bytes.Buffer{}).Bad("failed"); got != "failed" {
		t.Errorf("colours on a buffer: %q", got)
	}
	on := Palette{on: true}
	if got := on.Warn("warning"); got != "\x1b[33mwarning\x1b[0m" {
		t.Errorf("Warn on a terminal: %q", got)
	}
	if got := on.Good(""); got != "" {
		t.Errorf("an empty word painted: %q", got)
	}
}
