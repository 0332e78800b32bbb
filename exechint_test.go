package cordon

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

func TestExecErrorLocate(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws, shown, hidden, target := filepath.Join(base, "ws"), filepath.Join(base, "shown"), filepath.Join(base, "hidden"), filepath.Join(base, "target")
	for _, p := range []string{filepath.Join(ws, "bin", "wstool"), filepath.Join(shown, "tool"), filepath.Join(hidden, "tool2"), filepath.Join(target, "real")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(target, "real"), filepath.Join(shown, "linked")); err != nil {
		t.Fatal(err)
	}
	spec := &sandbox.Spec{
		Env:       []string{"PATH=/usr/bin:/bin"},
		Workspace: sandbox.Workspace{Path: ws},
		Mounts:    []sandbox.Mount{{Source: shown}, {Source: target, Target: "/elsewhere"}},
	}
	callerPath := filepath.Join(ws, "bin") + ":" + shown + ":" + hidden
	tests := []struct {
		name, path, interp string
		host               string
		hidden             []string
		pathDir            string
	}{
		{"in the workspace, outside the PATH", "wstool", "", filepath.Join(ws, "bin", "wstool"), nil, filepath.Join(ws, "bin")},
		{"mounted, outside the PATH", "tool", "", filepath.Join(shown, "tool"), nil, shown},
		{"not mounted", "tool2", "", filepath.Join(hidden, "tool2"), []string{hidden}, hidden},
		{"a link whose target is mounted elsewhere", "linked", "", filepath.Join(shown, "linked"), []string{target}, shown},
		{"a path not shown", filepath.Join(hidden, "tool2"), "", filepath.Join(hidden, "tool2"), []string{hidden}, ""},
		{"the interpreter", "./x.sh", "tool2", filepath.Join(hidden, "tool2"), []string{hidden}, hidden},
		{"nowhere", "nosuch", "", "", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &ExecError{Path: tc.path, Interpreter: tc.interp, NotFound: true, SearchPath: "/usr/bin:/bin"}
			e.locate(spec, callerPath)
			if e.Host != tc.host || !slices.Equal(e.Hidden, tc.hidden) || e.PathDir() != tc.pathDir {
				t.Fatalf("Host %q Hidden %q PathDir %q, want %q %q %q", e.Host, e.Hidden, e.PathDir(), tc.host, tc.hidden, tc.pathDir)
			}
		})
	}
}
