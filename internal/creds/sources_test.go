package creds

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEnvSource(t *testing.T) {
	env := []string{"A=1", "TOKEN=first", "EMPTY=", "TOKEN=second", "B"}
	tests := []struct {
		name, want, err string
	}{
		{"TOKEN", "second", ""},
		{"A", "1", ""},
		{"EMPTY", "", "EMPTY is empty"},
		{"MISSING", "", "MISSING is not set"},
		{"B", "", "B is not set"},
	}
	for _, tt := range tests {
		s, err := FromEnv(env, tt.name).Secret(context.Background())
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err = %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || s.Reveal() != tt.want {
			t.Errorf("%s: = %q, %v; want %q", tt.name, s.Reveal(), err, tt.want)
		}
	}
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, path, want, err string
	}{
		{"newline trimmed", write("a", "tok-a\n", 0o600), "tok-a", ""},
		{"crlf trimmed", write("b", "tok-b\r\n", 0o400), "tok-b", ""},
		{"only one newline trimmed", write("c", "tok-c\n\n", 0o600), "tok-c\n", ""},
		{"no newline", write("d", "tok-d", 0o600), "tok-d", ""},
		{"group readable", write("e", "tok-e\n", 0o640), "", "other users can access it"},
		{"world readable", write("f", "tok-f\n", 0o604), "", "other users can access it"},
		{"empty", write("g", "\n", 0o600), "", "is empty"},
		{"too large", write("h", strings.Repeat("x", maxSecretBytes+1), 0o600), "", "larger than"},
		{"missing", filepath.Join(dir, "nope"), "", "no such file"},
		{"directory", dir, "", "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromFile(tt.path).Secret(context.Background())
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				if strings.Contains(err.Error(), "tok-") {
					t.Fatalf("error holds the file's content: %v", err)
				}
				return
			}
			if err != nil || s.Reveal() != tt.want {
				t.Fatalf("= %q, %v; want %q", s.Reveal(), err, tt.want)
			}
		})
	}
	t.Run("home", func(t *testing.T) {
		t.Setenv("HOME", dir)
		s, err := FromFile("~/a").Secret(context.Background())
		if err != nil || s.Reveal() != "tok-a" {
			t.Fatalf("~/a = %q, %v", s.Reveal(), err)
		}
	})
}

func TestCommandSource(t *testing.T) {
	ctx := context.Background()
	t.Run("output once", func(t *testing.T) {
		count := filepath.Join(t.TempDir(), "count")
		var stderr bytes.Buffer
		c := FromCommand([]string{"sh", "-c", `echo run >> "$0"; echo "Passphrase:" >&2; printf 'cmd-token\n'`, count}, nil, &stderr)
		for range 3 {
			s, err := c.Secret(ctx)
			if err != nil || s.Reveal() != "cmd-token" {
				t.Fatalf("= %q, %v", s.Reveal(), err)
			}
		}
		if b, _ := os.ReadFile(count); string(b) != "run\n" {
			t.Fatalf("command ran %q times, want once", b)
		}
		if stderr.String() != "Passphrase:\n" {
			t.Fatalf("stderr not passed through: %q", stderr.String())
		}
	})
	t.Run("stdin", func(t *testing.T) {
		s, err := FromCommand([]string{"sh", "-c", "read x; echo got-$x"}, strings.NewReader("typed\n"), nil).Secret(ctx)
		if err != nil || s.Reveal() != "got-typed" {
			t.Fatalf("= %q, %v", s.Reveal(), err)
		}
	})
	fails := []struct {
		name string
		argv []string
		err  string
	}{
		{"exit status", []string{"sh", "-c", "echo secret-output-1; exit 3"}, "exit status 3"},
		{"prints nothing", []string{"true"}, "printed nothing"},
		{"no such command", []string{"/nonexistent/helper"}, "no such file"},
		{"empty argv", nil, "empty command"},
		{"too much", []string{"sh", "-c", "yes secret-output-2 | head -c 100000"}, "more than"},
	}
	for _, tt := range fails {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromCommand(tt.argv, nil, nil).Secret(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
			if strings.Contains(err.Error(), "secret-output") {
				t.Fatalf("error holds the command's output: %v", err)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		c := &CommandSource{Argv: []string{"sleep", "10"}, Timeout: 100 * time.Millisecond}
		start := time.Now()
		_, err := c.Secret(ctx)
		if err == nil || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("err = %v, want a timeout", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("timeout took %v", d)
		}
	})
}

func TestSourceFuncs(t *testing.T) {
	ctx := context.Background()
	revoked := 0
	var src Source = SourceFuncs{
		Token:  func(context.Context) (string, error) { return "ghs_minted", nil },
		Revoke: func(context.Context) error { revoked++; return nil },
	}
	if s, err := src.Secret(ctx); err != nil || s.Reveal() != "ghs_minted" {
		t.Fatalf("Secret = %q, %v", s.Reveal(), err)
	}
	if err := src.Close(ctx); err != nil || revoked != 1 {
		t.Fatalf("Close = %v, revoked %d", err, revoked)
	}
	empty := SourceFuncs{Token: func(context.Context) (string, error) { return "", nil }}
	if _, err := empty.Secret(ctx); err == nil {
		t.Fatal("an empty token was accepted")
	}
	if err := empty.Close(ctx); err != nil {
		t.Fatalf("Close without Revoke: %v", err)
	}
	if _, err := (SourceFuncs{}).Secret(ctx); err == nil {
		t.Fatal("no Token function was accepted")
	}
}
