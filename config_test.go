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
