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

func TestPrintable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain text", 100, "plain text"},
		{"line\nforged\x1b[2K\r\x7f\u009b", 100, "line?forged?[2K???"},
		{"abcdef", 3, "abc…"},
		{"héllo", 100, "héllo"},
		{"ok \u202egnp.exe\u2066x\u2069\u200f", 100, "ok ?gnp.exe?x??"},
	} {
		if got := Printable(tc.in, tc.max); got != tc.want {
			t.Errorf("Printable(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
