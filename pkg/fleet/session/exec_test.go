package session

import (
	"errors"
	"slices"
	"testing"
)

func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		env  map[string]string
		cwd  string
		want []string
		bad  bool
	}{
		{name: "as given", argv: []string{"ls", "-l"}, want: []string{"ls", "-l"}},
		{name: "env", argv: []string{"python"}, env: map[string]string{"B": "2", "A": "1 1"}, want: []string{"env", "A=1 1", "B=2", "python"}},
		{name: "cwd", argv: []string{"pytest"}, cwd: "/testbed", env: map[string]string{"A": "1"},
			want: []string{"sh", "-c", `cd "$1" || exit 126; shift; exec env "$@"`, "sh", "/testbed", "A=1", "pytest"}},
		{name: "no command", bad: true},
		{name: "bad env name", argv: []string{"x"}, env: map[string]string{"A=B": "1"}, bad: true},
		{name: "empty env name", argv: []string{"x"}, env: map[string]string{"": "1"}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := command(tc.argv, tc.env, tc.cwd)
			if tc.bad {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("command() = %q, %v; want ErrInvalid", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("command() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// tar's complaints are kept to their start, however much it writes.
func TestFirstBytes(t *testing.T) {
	f := &firstBytes{max: 8}
	for range 1000 {
		if n, err := f.Write([]byte("tar: no such file\n")); n != 18 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got, want := f.String(), "tar: no … (17992 bytes more)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if len(f.kept) != 8 {
		t.Errorf("kept %d bytes, want 8", len(f.kept))
	}
}
