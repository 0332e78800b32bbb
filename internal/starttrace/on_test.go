//go:build cordontrace

package starttrace

import (
	"strings"
	"testing"
)

// TestMarkPrintsOneLine checks the line bench/timeline parses: prefix, time, pid, step.
func TestMarkPrintsOneLine(t *testing.T) {
	b := stderrOf(t, func() { Mark("spec built") })
	f := strings.SplitN(strings.TrimSuffix(string(b), "\n"), " ", 4)
	if len(f) != 4 || f[0] != Prefix || f[3] != "spec built" || !strings.Contains(f[1], ".") {
		t.Fatalf("mark line %q", b)
	}
}
