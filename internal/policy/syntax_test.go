package policy

import (
	"errors"
	"strings"
	"testing"
)

// TestSyntaxErrorLine: a YAML syntax error names the line to fix, not the line above the section
// go-yaml was parsing when it gave up.
func TestSyntaxErrorLine(t *testing.T) {
	tests := []struct {
		name, src string
		line      int
		problem   string
	}{
		{"sequence item under-indented", "version: 1\nnetwork:\n  allow:\n    - a.example.com\n   - b.example.com\n", 5, "did not find expected key"},
		{"key between two indents", "version: 1\nnetwork:\n  allow:\n    - a.example.com\n  presets: [github]\n deny: [c.example.com]\n", 6, "did not find expected key"},
		{"key indented like the list", "version: 1\nfilesystem:\n  readonly:\n    - /opt\n    readwrite:\n      - /srv\n", 5, "did not find expected '-' indicator"},
		{"key over-indented", "version: 1\nlimits:\n  memory: 1G\n    pids: 3\n", 4, "mapping values are not allowed in this context"},
		{"deep in a long section", "version: 1\nnetwork:\n  allow:\n    - a.example.com\n    - b.example.com\n    - c.example.com\n    - d.example.com\n  - e.example.com\n", 8, "did not find expected key"},
		{"unclosed flow list", "version: 1\nenv:\n  pass: [A\n  set: {}\n", 3, "did not find expected ',' or ']'"},
		{"tab", "version: 1\n\tlimits: 3\n", 2, "found a tab character that violates indentation"},
		// A flow list over several lines is cut mid-list by the search: that problem is not the one
		// reported, so the line at fault is still found.
		{"after a multi-line flow list", "version: 1\nnetwork:\n  allow: [a.example.com,\n    b.example.com]\n  presets: [github]\n   deny: [c.example.com]\n", 6, "did not find expected key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.src), Options{})
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("want a *Error, got %v", err)
			}
			if pe.Line != tc.line || !strings.Contains(pe.Msg, tc.problem) {
				t.Fatalf("want line %d %q, got line %d: %v", tc.line, tc.problem, pe.Line, err)
			}
		})
	}
}

// TestSyntaxErrorLineBudget: a large malformed file is not re-parsed without bound; its error keeps
// a line all the same.
func TestSyntaxErrorLineBudget(t *testing.T) {
	src := "version: 1\nnetwork:\n  allow:\n" + strings.Repeat("    - a.example.com # "+strings.Repeat("x", 60)+"\n", 12000) + "   - b.example.com\n"
	if len(src) > MaxFileSize {
		t.Fatalf("test file too large: %d", len(src))
	}
	_, err := Parse("p.yaml", []byte(src), Options{})
	var pe *Error
	if !errors.As(err, &pe) || pe.Line == 0 {
		t.Fatalf("want a positioned *Error, got %v", err)
	}
}
