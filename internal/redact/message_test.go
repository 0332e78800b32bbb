package redact

import "testing"

// TestBytesAndSpans: a message searched whole gets every value replaced, whatever the lengths; a
// value cut between two messages is found by Spans, and one wholly in either (already replaced) or
// absent is not.
func TestBytesAndSpans(t *testing.T) {
	r := New([]Pair{{Secret: "SECRET-VALUE", Replacement: "ph"}})
	if got := string(r.Bytes([]byte("a SECRET-VALUE b SECRET-VALUE"))); got != "a ph b ph" || r.Count() != 2 {
		t.Fatalf("Bytes: %q (count %d)", got, r.Count())
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"hello SECRET-", "VALUE world", true},
		{"S", "ECRET-VALUE", true},
		{"SECRET-VALU", "E", true},
		{"hello ph", "world", false},
		{"SECRET", "VALUE", false},
		{"", "SECRET-VALUE", false},
	} {
		if got := r.Spans([]byte(tc.a), []byte(tc.b)); got != tc.want {
			t.Errorf("Spans(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	var none *Replacer
	if string(none.Bytes([]byte("x"))) != "x" || none.Spans([]byte("a"), []byte("b")) {
		t.Error("a nil Replacer changed something")
	}
}
