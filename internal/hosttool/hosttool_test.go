package hosttool

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindSkipsTheProject: a program on PATH inside the project (directly, through a symbolic link
// to a directory there, or relative) is never the one found; the next one outside is, and one found
// only inside is an error naming where it was.
func TestFindSkipsTheProject(t *testing.T) {
	root := t.TempDir()
	project := filepath.Join(root, "project")
	tool := func(dir string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	venv, npmBin, outside := filepath.Join(project, ".venv/bin"), filepath.Join(project, "node_modules/.bin"), filepath.Join(root, "usr/bin")
	tool(venv)
	tool(npmBin)
	tool(outside)
	link := filepath.Join(root, "linked")
	if err := os.Symlink(npmBin, link); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(root, "noexec")
	if err := os.MkdirAll(noexec, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noexec, "tool"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pathOf := func(dirs ...string) []string { return []string{"PATH=" + strings.Join(dirs, ":")} }

	got, err := Find("tool", pathOf(venv, link, "node_modules/.bin", noexec, outside), project)
	if err != nil || got != filepath.Join(outside, "tool") {
		t.Errorf("Find = %q, %v; want the one outside the project", got, err)
	}
	// Without the project to skip, the first on PATH: the control.
	if got, err := Find("tool", pathOf(venv, outside)); err != nil || got != filepath.Join(venv, "tool") {
		t.Errorf("Find with no project = %q, %v; want the first on PATH", got, err)
	}
	_, err = Find("tool", pathOf(venv, link), project)
	if err == nil || !strings.Contains(err.Error(), "found only inside the project") {
		t.Errorf("Find with the tool only inside = %v", err)
	}
	if _, err := Find("absent", pathOf(outside), project); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Find of an absent tool = %v, want exec.ErrNotFound", err)
	}
	if _, err := Find("../usr/bin/tool", pathOf(outside), project); err == nil {
		t.Error("Find took a path")
	}
	// A project reached through a symbolic link is the same project.
	alias := filepath.Join(root, "alias")
	if err := os.Symlink(project, alias); err != nil {
		t.Fatal(err)
	}
	if got, err := Find("tool", pathOf(venv, outside), alias); err != nil || got != filepath.Join(outside, "tool") {
		t.Errorf("Find with the project named through a link = %q, %v", got, err)
	}
}

// TestSystemIgnoresPATH: System finds a program in the system's directories whatever PATH says.
func TestSystemIgnoresPATH(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	got, err := System("sh")
	if err != nil || strings.HasPrefix(got, dir) {
		t.Errorf("System(sh) = %q, %v; want the system's", got, err)
	}
}
