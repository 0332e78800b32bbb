// Package benchstat holds the order statistics the benchmarks report, so that every bench that
// says "median" or "p90" means the same value: the nearest rank of the sorted samples, never an
// interpolation between two of them.
package benchstat

import (
	"cmp"
	"slices"
)

// Quantile is the p-quantile of v (0 ≤ p ≤ 1) by nearest rank: the element at index ⌊p·n⌋ of v
// sorted, the last one for p = 1. v is left as it is; no values give the zero value.
func Quantile[T cmp.Ordered](v []T, p float64) T {
	if len(v) == 0 {
		var zero T
		return zero
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, max(0, int(p*float64(len(s)))))]
}

// Median is Quantile(v, 0.5): for an even count, the upper of the two middle values.
func Median[T cmp.Ordered](v []T) T { return Quantile(v, 0.5) }
