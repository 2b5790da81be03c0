package stats

import "testing"

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tt := range []struct {
		q, want float64
	}{{0, 1}, {0.2, 1}, {0.5, 3}, {0.99, 5}, {1, 5}} {
		if got := Percentile(xs, tt.q); got != tt.want {
			t.Errorf("Percentile(%v, %g) = %g, want %g", xs, tt.q, got, tt.want)
		}
	}
	if Percentile(nil, 0.5) != 0 || Mean(nil) != 0 {
		t.Error("no values: want 0")
	}
	if Median([]float64{1, 2, 3, 4}) != 2 || Mean([]float64{1, 2, 3, 4}) != 2.5 {
		t.Error("median or mean of 1..4")
	}
	if xs[0] != 5 {
		t.Error("Percentile sorted its input")
	}
}
