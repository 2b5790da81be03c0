package output

import "testing"

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
