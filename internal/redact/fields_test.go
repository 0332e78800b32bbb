package redact

import "testing"

func TestName(t *testing.T) {
	r := New([]Pair{{"ghs_REALREAL", "ghs_PLACEHOL"}})
	for in, want := range map[string]string{
		"X-Ghs_realreal":           "X-ghs_PLACEHOL", // canonicalized by the transport: found all the same
		"x-ghs_realreal-ghs_RE":    "x-ghs_PLACEHOL-ghs_RE",
		"Content-Type":             "Content-Type",
		"GHS_REALREALGHS_REALREAL": "ghs_PLACEHOLghs_PLACEHOL",
	} {
		if got := r.Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
	if r.Count() != 4 {
		t.Errorf("Count = %d, want 4", r.Count())
	}
}

func TestAssembled(t *testing.T) {
	const s = "sk-ant-REALKEY-0123456789"
	r := New([]Pair{{s, "sk-ant-PLACEHO-LDERXXXXXX"}, {"AKIAREAL", "AKIAPHPH"}})
	tests := []struct {
		name   string
		fields []string
		want   bool
	}{
		{"nothing", []string{"Content-Type", "text/plain", "Content-Length", "12"}, false},
		{"two values", []string{"X-A", "key " + s[:10], "X-B", s[10:] + " end"}, true},
		{"the other order", []string{"X-B", s[10:], "X-A", s[:10]}, true},
		{"a name and its value", []string{"X-" + s[:4], s[4:]}, true},
		{"two names, other case", []string{"X-Sk-ant-realk", "Ey-0123456789-Tail"}, true},
		{"three pieces", []string{"a " + s[:3], s[3:9], s[9:] + " b"}, true},
		{"one byte and the rest", []string{s[:len(s)-1], s[len(s)-1:]}, true},
		{"the ends of one field", []string{s[7:] + " ... " + s[:7]}, true},
		{"a part only", []string{"X-A", s[:20]}, false},
		{"parts with a gap", []string{s[:10], s[11:]}, false},
		{"inside fields, not at their ends", []string{"x" + s[:10] + "x", "x" + s[10:]}, false},
		{"the second secret", []string{"AKIA", "REAL"}, true},
	}
	for _, tc := range tests {
		if got := r.Assembled(tc.fields); got != tc.want {
			t.Errorf("%s: Assembled(%q) = %v, want %v", tc.name, tc.fields, got, tc.want)
		}
	}
	if (*Replacer)(nil).Assembled([]string{"a", "b"}) {
		t.Error("a nil Replacer assembled something")
	}
}

// FuzzAssembled: a secret cut anywhere into two fields, with anything before the first piece and
// after the second, in either order among other fields, is found.
func FuzzAssembled(f *testing.F) {
	f.Add("sk-ant-REALKEY-0123456789", uint8(5), "X-A: ", " end", "Content-Type")
	f.Add("ab", uint8(1), "", "", "")
	f.Fuzz(func(t *testing.T, secret string, cut uint8, before, after, other string) {
		if len(secret) < 2 {
			return
		}
		k := 1 + int(cut)%(len(secret)-1)
		r := New([]Pair{{secret, secret}})
		fields := []string{other, secret[k:] + after, before + secret[:k]}
		if !r.Assembled(fields) {
			t.Fatalf("%q cut at %d into %q was not found", secret, k, fields)
		}
	})
}
