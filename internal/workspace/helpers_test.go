package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// sh runs a shell script in dir and fails the test on error.
func sh(t testing.TB, dir, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// newProject makes a real git repository with a little of everything, committed.
func newProject(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, p, `
git init -q -b main .
printf 'hello\nworld\n' > README.md
mkdir -p src dir/sub docs
printf 'package main\n\nfunc main() {\n\tprintln("hi")\n}\n' > src/main.go
printf 'package main\n' > src/util.go
printf 'x\n' > dir/sub/x.txt
printf 'y\n' > dir/y.txt
printf 'doc\n' > docs/a.md
printf '\000\001\002binary' > data.bin
printf '#!/bin/sh\necho run\n' > script.sh && chmod 755 script.sh
ln -s README.md readme-link
git add -A && git commit -qm initial
`)
	return p
}

// testRun makes a store and a finished-looking run for project, with this process as its cordon.
func testRun(t testing.TB, project string) *runstate.Run {
	t.Helper()
	s := runstate.Store{Root: filepath.Join(t.TempDir(), "state")}
	pid, start, err := runstate.Self()
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Create(runstate.Meta{Project: project, Command: []string{"agent", "--fix"}, PID: pid, PIDStart: start})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// prepare makes the workspace after the project's files are safely older than the base time (the
// file-system clock advances in ticks of a few milliseconds).
func prepare(t testing.TB, r *runstate.Run, project string, opts PrepareOptions) sandbox.Workspace {
	t.Helper()
	time.Sleep(30 * time.Millisecond)
	ws, err := PrepareWith(r, project, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// agent runs script as the agent would: in the workspace, mounted the way cordon's init mounts it
// (overlayfs with userxattr inside a new user and mount namespace, at the project's own path), or in
// the copy. It returns a copy of the agent's final view, taken from inside, for comparisons.
func agent(t testing.TB, ws sandbox.Workspace, script string) string {
	t.Helper()
	view := filepath.Join(t.TempDir(), "view")
	full := fmt.Sprintf("cd %q\n%s\ncd /\ncp -a %q %q", ws.Path, script, ws.Path, view)
	if ws.Overlay != nil {
		full = fmt.Sprintf("mount -t overlay overlay -o %q %q\n%s", OverlayOptions(ws.Source, ws.Overlay.Upper, ws.Overlay.Work), ws.Path, full)
		cmd := exec.Command("unshare", "-Urm", "sh", "-ec", full)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a", "GIT_COMMITTER_NAME=a",
			"GIT_COMMITTER_EMAIL=a@a", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("agent: %v\n%s", err, out)
		}
		return view
	}
	full = fmt.Sprintf("cd %q\n%s\ncd /\ncp -a %q %q", ws.Source, script, ws.Source, view)
	sh(t, "/", full)
	return view
}

// exited marks the run's agent as exited.
func exited(t testing.TB, r *runstate.Run) {
	t.Helper()
	if err := r.Finish(0); err != nil {
		t.Fatal(err)
	}
}

// tree describes every entry under dir (type, permission bits, content hash or link target),
// skipping paths for which skip returns true.
func tree(t testing.TB, dir string, skip func(string) bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if skip != nil && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(h[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// noGit skips the .git directory at the top.
func noGit(rel string) bool { return rel == ".git" }

// sameTree reports the differences between two tree descriptions.
func sameTree(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", k, got[k], v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: unexpected %q", k, v))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s:\n  %s", what, strings.Join(diffs, "\n  "))
	}
}

func changePaths(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, string(c.Kind[0])+" "+c.Path)
	}
	return out
}
