//go:build linux

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestConnectionStringsMasked: a .env holding connection strings with a short password for a
// documentation domain and a guessable one for a private address (both once judged harmless and
// readable inside) is masked: `cat .env` inside shows the empty mask, and the user is told.
func TestConnectionStringsMasked(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		// Split at the password, so that this file holds no connection string itself.
		env := "DATABASE_URL=postgres://u:" + "p@prod.example.com/db\n" +
			"ADMIN_URL=postgres://admin:" + "password@10.0.0.5/app\n"
		h.writeFile(filepath.Join(h.ws, ".env"), env, 0o644)
		if r := h.plain("cat .env"); !strings.Contains(r.stdout, "10.0.0.5") {
			t.Fatalf("control: .env is not readable without the sandbox:\n%s", r)
		}
		r := h.sandboxed("", "echo BEGIN; cat .env; echo END")
		if r.code != 0 || !strings.Contains(r.stdout, "BEGIN\nEND") {
			t.Fatalf("want .env readable as an empty mask:\n%s", r)
		}
		for _, leak := range []string{"prod.example.com", "10.0.0.5", "admin", "password"} {
			if strings.Contains(r.stdout, leak) {
				t.Errorf("%q reached the agent:\n%s", leak, r)
			}
		}
		if !strings.Contains(r.stderr, "masked 1 secret-shaped file from the agent: .env") {
			t.Errorf("the user is not told .env was masked:\n%s", r)
		}
	})
}

// TestMaskedFilesAllListed: when more files are masked than the start line names, the line says
// where the run's record lists every one of them, and that list names each file (with the redacted
// finding) and no password. It used to end in "and 2 more", which nothing could expand.
func TestMaskedFilesAllListed(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		names := []string{"a.env", "b.env", "c.env", "config/d.env", "config/e.env"}
		for i, n := range names {
			h.writeFile(filepath.Join(h.ws, n), "DB=mysql://root:"+"pw"+strings.Repeat("9", i)+"@db.corp.io/x\n", 0o644)
		}
		r := h.sandboxed("", "cat config/e.env; echo RAN")
		if !strings.Contains(r.stdout, "RAN") || strings.Contains(r.stdout, "db.corp.io") {
			t.Fatalf("want config/e.env masked:\n%s", r)
		}
		m := regexp.MustCompile(`masked 5 secret-shaped files from the agent: a\.env, b\.env, c\.env and 2 more, all in (\S+)`).FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("the line does not say where all masked files are listed:\n%s", r)
		}
		if !strings.HasPrefix(m[1], filepath.Join(h.home, ".local", "state", "cordon", "runs")+"/") {
			t.Errorf("the list %s is not in the run's directory", m[1])
		}
		data, err := os.ReadFile(m[1])
		if err != nil {
			t.Fatalf("reading the list the line names: %v", err)
		}
		for _, n := range names {
			if !strings.Contains(string(data), n+":1: database URL to db.corp.io (mysql://root:…@db.corp.io)") {
				t.Errorf("the list does not name %s:\n%s", n, data)
			}
		}
		if strings.Contains(string(data), ":pw") {
			t.Errorf("the list holds a password:\n%s", data)
		}
	})
}
