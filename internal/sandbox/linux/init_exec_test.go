//go:build linux

package linux

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

func TestShebang(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string
		interp        string
		args          []string
	}{
		{"absolute", "#!/bin/sh\necho\n", "/bin/sh", nil},
		{"env", "#!/usr/bin/env python9\n", "/usr/bin/env", []string{"python9"}},
		{"spaces and options", "#! /usr/bin/env -S node --x\n", "/usr/bin/env", []string{"-S", "node", "--x"}},
		{"no newline", "#!/nonexistent/sh", "/nonexistent/sh", nil},
		{"not a script", "\x7fELF\x02\x01", "", nil},
		{"empty line", "#!\n", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.content), 0o755); err != nil {
				t.Fatal(err)
			}
			interp, args := shebang(p)
			if interp != tc.interp || !slices.Equal(args, tc.args) {
				t.Fatalf("shebang = %q %q, want %q %q", interp, args, tc.interp, tc.args)
			}
		})
	}
}

func TestEnvInterpreter(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("tool", "#!/bin/sh\n")
	write("found.sh", "#!/usr/bin/env tool\n")
	write("missing.py", "#!/usr/bin/env python9\n")
	write("options.py", "#!/usr/bin/env -S python9 -u\n")
	env := []string{"PATH=" + dir}
	if err := envInterpreter("./found.sh", "./found.sh", dir, env); err != nil {
		t.Errorf("an interpreter in the PATH: %v", err)
	}
	if err := envInterpreter("./options.py", "./options.py", dir, env); err != nil {
		t.Errorf("env with options is left to env: %v", err)
	}
	var ee *sandbox.ExecError
	err := envInterpreter("./missing.py", "./missing.py", dir, env)
	if !errors.As(err, &ee) || !ee.NotFound || ee.Interpreter != "python9" || ee.Path != "./missing.py" {
		t.Fatalf("a missing interpreter: %#v", err)
	}
}

func TestExecErrorTellsEACCESApart(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("echo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ee *sandbox.ExecError
	if err := execError("plain", plain, syscall.EACCES); !errors.As(err, &ee) || !ee.NoExecBit || ee.NotFound || !errors.Is(err, syscall.EACCES) {
		t.Errorf("a file without execute permission: %#v", err)
	}
	if err := execError("dir", dir, syscall.EACCES); !errors.As(err, &ee) || ee.NoExecBit || !errors.Is(err, syscall.EACCES) {
		t.Errorf("a directory: %#v", err)
	}
}

// TestNotExecutable: before a runtime starts, what execve would refuse inside it is the error the
// native box reports (no execute bit, a directory, a missing #! interpreter); what would run is not.
func TestNotExecutable(t *testing.T) {
	dir := t.TempDir()
	for name, f := range map[string]struct {
		body string
		mode os.FileMode
	}{
		"plain": {"echo\n", 0o644}, "run": {"#!/bin/sh\necho\n", 0o755}, "binary": {"\x7fELF", 0o755},
		"lost": {"#!/nonexistent/sh\n", 0o755}, "relative": {"#!run\n", 0o755},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path      string
		errno     error // nil: no error
		noExecBit bool
		interp    string
	}{
		{path: "plain", errno: syscall.EACCES, noExecBit: true},
		{path: ".", errno: syscall.EACCES},
		{path: "lost", errno: syscall.ENOENT, interp: "/nonexistent/sh"},
		{path: "run"},
		{path: "binary"},
		{path: "relative"}, // its interpreter, relative to the working directory, exists
		{path: "absent"},   // lookPath reports it
	} {
		err := notExecutable(tc.path, tc.path, dir)
		var ee *sandbox.ExecError
		switch {
		case tc.errno == nil && err != nil:
			t.Errorf("%s: %v, want none", tc.path, err)
		case tc.errno == nil:
		case !errors.As(err, &ee) || !errors.Is(err, tc.errno) || ee.NoExecBit != tc.noExecBit || ee.Interpreter != tc.interp:
			t.Errorf("%s: %#v, want %v (no exec bit %v, interpreter %q)", tc.path, err, tc.errno, tc.noExecBit, tc.interp)
		}
	}
}
