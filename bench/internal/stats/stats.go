// Package stats is the arithmetic the benchmarks report with.
package stats

import (
	"math"
	"slices"
)

// Percentile is the nearest-rank q-quantile (q in [0, 1]) of xs: the
// smallest value with at least q of the values at or below it; 0 for no
// values.
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	rank := int(math.Ceil(q * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Median is the nearest-rank median of xs.
func Median(xs []float64) float64 { return Percentile(xs, 0.5) }

// Mean is the mean of xs, 0 for no values.
func Mean(xs []float64) float64 {
	total := 0.0
	for _, x := range xs {
		total += x
	}
	return total / float64(max(1, len(xs)))
}
