package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFallbackToCopy: when the sandbox reports that it cannot mount the overlay, the prepared run
// becomes a copy whose edits apply like an overlay's, and the note says why.
func TestFallbackToCopy(t *testing.T) {
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	if ws.Overlay == nil {
		t.Fatalf("Prepare did not choose an overlay: %+v", ws)
	}
	ws, err := FallbackToCopy(r, errors.New("mount: invalid argument"))
	if err != nil {
		t.Fatal(err)
	}
	if ws.Overlay != nil || ws.Path != p || ws.Source == p {
		t.Fatalf("fallback workspace is not a copy at the project's path: %+v", ws)
	}
	if b, err := os.ReadFile(filepath.Join(ws.Source, "README.md")); err != nil || string(b) != "hello\nworld\n" {
		t.Fatalf("the copy lacks the project's files: %q %v", b, err)
	}
	info, err := LoadInfo(r)
	if err != nil || info.Mode != ModeCopy || !strings.Contains(info.Note, "mount: invalid argument") {
		t.Fatalf("info after fallback: %+v %v", info, err)
	}
	if cs, err := Changes(r); err != nil || len(cs) != 0 {
		t.Fatalf("a fresh copy reports changes: %v %v", cs, err)
	}
	agent(t, ws, "echo more >> README.md")
	exited(t, r)
	if _, err := Apply(r, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(p, "README.md")); string(b) != "hello\nworld\nmore\n" {
		t.Fatalf("apply after fallback: %q", b)
	}
	if _, err := FallbackToCopy(r, errors.New("again")); err == nil {
		t.Fatal("a second fallback was accepted")
	}
}
