package benchstat

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 6, 8, 7, 10, 9}
	for _, tc := range []struct {
		p    float64
		want float64
	}{{0, 1}, {0.1, 2}, {0.25, 3}, {0.5, 6}, {0.75, 8}, {0.9, 10}, {1, 10}, {-1, 1}, {2, 10}} {
		if got := Quantile(v, tc.p); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if v[0] != 5 {
		t.Error("Quantile sorted its argument")
	}
	if got := Median([]time.Duration{3, 1, 2}); got != 2 {
		t.Errorf("Median of an odd count = %v, want the middle", got)
	}
	if got := Median([]int(nil)); got != 0 {
		t.Errorf("Median of nothing = %v, want 0", got)
	}
}
