package gitref

import "testing"

func TestCheckGlob(t *testing.T) {
	for g, ok := range map[string]bool{
		"agent/*": true, "*": true, "release-[0-9]*": true, "fix-?": true, "main": true, "a.b/c": true,
		"[": false, "agent/[a-": false, "refs/heads/main": false, "/main": false, "main/": false, "a//b": false,
		"a..b": false, "a b": false, "a~1": false, "a:b": false, ".hidden": false, "x.lock": false, "": false, "@": false, "a@{1}": false,
	} {
		if err := CheckGlob(g); (err == nil) != ok {
			t.Errorf("CheckGlob(%q) = %v, want ok %v", g, err, ok)
		}
	}
}

func TestValidName(t *testing.T) {
	for s, ok := range map[string]bool{
		"heads/main": true, "heads/agent/x": true, "tags/v1.0": true, "heads/a-b_c": true,
		"": false, "@": false, "heads/": false, "heads/a.": false, "heads/a..b": false, "heads/a@{1}": false,
		"heads//a": false, "heads/.a": false, "heads/a.lock": false, "heads/a b": false, "heads/a\nb": false,
		"heads/a\x00": false, "heads/a\x7f": false, "heads/a~": false, "heads/a^": false, "heads/a:": false,
		"heads/a?": false, "heads/a*": false, "heads/a[": false, "heads/a\\b": false,
	} {
		if ValidName(s) != ok {
			t.Errorf("ValidName(%q) = %v", s, !ok)
		}
	}
}
