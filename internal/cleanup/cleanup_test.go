package cleanup

import (
	"slices"
	"testing"
)

func TestStack(t *testing.T) {
	tests := []struct {
		name    string
		release bool
		want    []int // the actions Clean runs, in order
		later   []int // what the function Release returned runs
	}{
		{name: "clean runs all, last first", want: []int{3, 2, 1}},
		{name: "release runs nothing now", release: true, want: nil, later: []int{3, 2, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ran []int
			push := func(n int) func() { return func() { ran = append(ran, n) } }
			s := Make(push(1))
			s.Add(nil)
			s.Add(push(2))
			s.Add(push(3))
			var later func()
			if tc.release {
				later = s.Release()
			}
			s.Clean()
			s.Clean() // a second Clean runs nothing more
			if !slices.Equal(ran, tc.want) {
				t.Fatalf("Clean ran %v, want %v", ran, tc.want)
			}
			if later != nil {
				ran = nil
				later()
				if !slices.Equal(ran, tc.later) {
					t.Fatalf("the released actions ran %v, want %v", ran, tc.later)
				}
			}
		})
	}
}

func TestZeroStack(t *testing.T) {
	var s Stack
	s.Clean()
	s.Release()()
}
