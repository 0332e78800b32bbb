package services

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		line string
		want []string
		err  string
	}{
		{"SET a b", []string{"SET", "a", "b"}, ""},
		{"  SET\ta   b  ", []string{"SET", "a", "b"}, ""},
		{`SET greeting "hello world"`, []string{"SET", "greeting", "hello world"}, ""},
		{`SET k "a\nb\x41\"\\"`, []string{"SET", "k", "a\nbA\"\\"}, ""},
		{`SET k 'it\'s'`, []string{"SET", "k", "it's"}, ""},
		{`SET k ""`, []string{"SET", "k", ""}, ""},
		{`SET k "open`, nil, "unterminated double quote"},
		{`SET k 'open`, nil, "unterminated single quote"},
		{`SET k "a"b`, nil, "closing quote must be followed by a space"},
	}
	for _, tt := range tests {
		got, err := SplitCommand(tt.line)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("SplitCommand(%q) error %v, want %q", tt.line, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
}

// FuzzSplitCommand: fixture lines come from the project (the agent may have written them in an
// earlier run): splitting never panics or loops, and words without quotes or escapes come back as
// they were.
func FuzzSplitCommand(f *testing.F) {
	for _, s := range []string{"SET a b", `SET k "a\x4"`, `'`, `"\`, `a "b" 'c\'' d`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args, err := SplitCommand(line)
		if err != nil || strings.ContainsAny(line, `"'\`) {
			return
		}
		want := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
		if !reflect.DeepEqual(want, args) && len(want)+len(args) > 0 {
			t.Errorf("SplitCommand(%q) = %q, want %q", line, args, want)
		}
	})
}

func TestParseVersion(t *testing.T) {
	for _, tt := range []struct{ kind, out, want string }{
		{"postgres", "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n", "15.18"},
		{"postgres", "postgres (PostgreSQL) 17beta1\n", "17"},
		{"redis", "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64\n", "7.0.15"},
		{"mysql", "/usr/sbin/mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64 (Debian 12)\n", "10.11.19"},
		{"mysql", "/usr/sbin/mysqld  Ver 8.0.36 for Linux on x86_64 (MySQL Community Server - GPL)\n", "8.0.36"},
		{"redis", "something else\n", ""},
		{"postgres", "(PostgreSQL) .", ""},
	} {
		if got := parseVersion(tt.kind, []byte(tt.out)); got != tt.want {
			t.Errorf("parseVersion(%s, %q) = %q, want %q", tt.kind, tt.out, got, tt.want)
		}
	}
}

func TestFindNamesThePackage(t *testing.T) {
	for kind, pkg := range debianPackage {
		_, err := findIn(kind, []string{t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "install the Debian package "+pkg) {
			t.Errorf("%s missing: %v", kind, err)
		}
	}
}

func TestFixtureMessage(t *testing.T) {
	msg := "psql:<stdin>:3: ERROR:  relation \"nosuch\" does not exist\nLINE 1: INSERT INTO nosuch VALUES (2);\n                    ^\nmore\nand more"
	got := (&FixtureError{File: "db/seed.sql", Message: fixtureMessage(msg, "psql:<stdin>:", "db/seed.sql")}).Error()
	want := "fixture db/seed.sql:3: ERROR:  relation \"nosuch\" does not exist\nLINE 1: INSERT INTO nosuch VALUES (2);\n                    ^\nmore"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
