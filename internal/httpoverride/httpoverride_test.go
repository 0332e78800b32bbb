package httpoverride

import "testing"

func TestIs(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"X-HTTP-Method-Override", true},
		{"x-http-method-override", true},
		{"X_HTTP_METHOD_OVERRIDE", true}, // CGI-style spelling reaches the same variable
		{"x_original_url", true},
		{"X-Envoy-Original-Path", true},
		{"X-Forwarded-Prefix", true},
		{"X-Forwarded-For", false},
		{"X-Api-Key", false},
		{"Host", false},
		{"", false},
		{"x-http-method-override ", false}, // not a header name; callers validate names first
	} {
		if got := Is(tc.name); got != tc.want {
			t.Errorf("Is(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestIsKeyTakesTheComparisonForm: IsKey does not normalise, so a caller that skipped Key is not
// silently forgiven in one spelling and not another.
func TestIsKeyTakesTheComparisonForm(t *testing.T) {
	if IsKey("X-Original-URL") {
		t.Error(`IsKey("X-Original-URL") = true, want false (not in Key form)`)
	}
	if k := Key("X_Original_URL"); k != "x-original-url" || !IsKey(k) {
		t.Errorf("Key(X_Original_URL) = %q, IsKey = %v", k, IsKey(k))
	}
}
