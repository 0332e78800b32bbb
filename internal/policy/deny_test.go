package policy

import (
	"strings"
	"testing"
	"time"
)

func TestDenyMatcher(t *testing.T) {
	m, err := CompileDeny([]string{"**/.env", "*.pem", "secrets/", "config/prod.yaml", "logs/**/*.log", "**/**/cache", "id_rsa*"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rel   string
		isDir bool
		want  bool
	}{
		{".env", false, true},
		{"a/b/.env", false, true},
		{".env.example", false, false},
		{"a/.envrc", false, false},
		{"key.pem", false, true},
		{"deep/dir/key.pem", false, true},
		{"pem", false, false},
		{"secrets", true, true},
		{"secrets", false, false}, // trailing slash: directories only
		{"secrets/a.txt", false, true},
		{"x/secrets/y/z", false, true},
		{"config/prod.yaml", false, true},
		{"sub/config/prod.yaml", false, false}, // a slash anchors the glob to the root
		{"config/dev.yaml", false, false},
		{"logs/a.log", false, true},
		{"logs/x/y/a.log", false, true},
		{"logs/a.txt", false, false},
		{"other/logs/a.log", false, false},
		{"cache", true, true},
		{"a/cache/b", false, true},
		{"id_rsa", false, true},
		{"home/.ssh/id_rsa.pub", false, true},
		{"/a/.env", false, true},
		{"./a/.env", false, true},
		{".", true, false},
		{"", true, false},
		{"../.env", false, false},
		{"README.md", false, false},
	}
	for _, tt := range tests {
		if got := m.Match(tt.rel, tt.isDir); got != tt.want {
			t.Errorf("Match(%q, %v) = %v, want %v", tt.rel, tt.isDir, got, tt.want)
		}
	}
}

func TestDenyMatcherDeepTreeIsFast(t *testing.T) {
	m, err := CompileDeny([]string{strings.Repeat("**/a/", 30) + "b"})
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("a/", 500) + "c"
	start := time.Now()
	if m.Match(deep, false) {
		t.Errorf("Match(deep) = true, want false")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Match on a deep path took %v", d)
	}
	if !m.Match(strings.Repeat("a/", 30)+"b", false) {
		t.Error("Match(a/.../b) = false, want true")
	}
}

func TestDenyMatcherEmpty(t *testing.T) {
	m, err := CompileDeny(nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Match(".env", false) {
		t.Error("an empty deny list matched")
	}
}

func TestCompileDenyErrors(t *testing.T) {
	for _, g := range []string{"", "/etc/passwd", "~/x", "../x", "a/../../x", "a//b", "./a", "!keep", "[", "a/[/b", "x\x00"} {
		if _, err := CompileDeny([]string{g}); err == nil {
			t.Errorf("CompileDeny(%q) succeeded, want an error", g)
		}
	}
}
