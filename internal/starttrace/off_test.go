//go:build !cordontrace

package starttrace

import "testing"

// TestMarkPrintsNothingByDefault: a build without the tag must never write the marks, which would
// land on the user's terminal and on the sandboxed command's standard error.
func TestMarkPrintsNothingByDefault(t *testing.T) {
	if b := stderrOf(t, func() { Mark("main") }); len(b) != 0 || Enabled {
		t.Fatalf("an untagged build printed %q (Enabled=%v)", b, Enabled)
	}
}
