package hostname

import (
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"Example.COM.", "example.com", true},
		{"a_b-c.d0", "a_b-c.d0", true},
		{strings.Repeat("a", 63) + ".x", strings.Repeat("a", 63) + ".x", true},
		{strings.Repeat("a", 64) + ".x", "", false},
		{"", "", false},
		{".", "", false},
		{"a..b", "", false},
		{".a", "", false},
		{"a.", "a", true},
		{"a..", "", false},
		{"*.example.com", "", false},
		{"exa\\.mple.com", "", false},
		{"\u212aelvin.example", "", false}, // the Kelvin sign, which strings.ToLower folds into "k"
		{"ex ample.com", "", false},
		{strings.Repeat("a.", 127) + "a", strings.Repeat("a.", 127) + "a", false},
	} {
		got, err := Normalize(tc.in)
		if tc.ok != (err == nil) || (tc.ok && got != tc.want) {
			t.Errorf("Normalize(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if Check("Example.com") == nil || Check("example.com.") == nil || Check("example.com") != nil {
		t.Error("Check accepts only the normalized form")
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"example.com", "A.B.", "\u212a", "a..b", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Normalize(s)
		if err != nil {
			return
		}
		if n2, err := Normalize(n); err != nil || n2 != n {
			t.Fatalf("Normalize is not idempotent: %q -> %q -> %q, %v", s, n, n2, err)
		}
		if Check(n) != nil {
			t.Fatalf("Check refuses Normalize's output %q", n)
		}
	})
}
