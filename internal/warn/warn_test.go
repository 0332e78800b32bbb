package warn

import (
	"slices"
	"testing"
)

func TestPrintf(t *testing.T) {
	var got []string
	// A plain func literal is a Func: callers pass their own sinks without converting.
	var f Func = func(line string) { got = append(got, line) }
	f.Printf("limits.%s: no usable cgroup (%v)", "pids", "read-only")
	f("as is")
	if want := []string{"limits.pids: no usable cgroup (read-only)", "as is"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	var none Func
	none.Printf("dropped %d", 1)
}
