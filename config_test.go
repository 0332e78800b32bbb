package cordon

import (
	"strings"
	"testing"
)

// TestCheckName: a run name reads as one word in a listing.
func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"": true, "fix-login": true, "a.b_c-1": true, "9lives": true,
		"two words": false, "-dash": false, ".hidden": false, "_x": false, "a/b": false, "é": false,
		strings.Repeat("x", 64): true, strings.Repeat("x", 65): false,
	} {
		if err := CheckName(name); (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// TestIsolationResolve: the caller's tier, else the policy's, else native; a caller may make the
// policy's tier stronger, never weaker; an unknown tier is refused.
func TestIsolationResolve(t *testing.T) {
	for _, tc := range []struct {
		caller Isolation
		policy string
		want   Isolation
		err    string
	}{
		{"", "", IsolationNative, ""},
		{"", "gvisor", IsolationGVisor, ""},
		{IsolationGVisor, "", IsolationGVisor, ""},
		{IsolationGVisor, "native", IsolationGVisor, ""},
		{IsolationNative, "native", IsolationNative, ""},
		{IsolationNative, "gvisor", "", "may not weaken"},
	} {
		got, err := tc.caller.resolve(tc.policy)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q.resolve(%q) = %q, %v; want %q, %q", tc.caller, tc.policy, got, err, tc.want, tc.err)
		}
	}
	if err := Isolation("kvm").check(); err == nil || !strings.Contains(err.Error(), "native, gvisor") {
		t.Errorf(`Isolation("kvm").check() = %v`, err)
	}
}
