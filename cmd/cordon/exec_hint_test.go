//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecHintNamesTheFix: a command that cannot be executed gets one line whose suggested fix is
// the one that applies, naming the directory or interpreter it is about: a PATH entry for a command
// that is inside but outside the sandbox's PATH, a mount for one the sandbox does not show, the
// interpreter for a script whose #! names a missing one, execute permission for a file without it.
func TestExecHintNamesTheFix(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		pol := h.policy("")
		// The sandbox's PATH keeps the caller's directories it shows; a policy that sets its own
		// PATH leaves the workspace's tools outside it.
		fixedPath := h.policy("env:\n  set: {PATH: \"/usr/local/bin:/usr/bin:/bin\"}\n")
		script := "#!/bin/sh\necho ran\n"
		wsBin := filepath.Join(h.ws, "tools", "bin")      // inside (the workspace), outside the sandbox's PATH
		homeBin := filepath.Join(h.home, ".local", "bin") // on the host, not shown inside
		optBin := filepath.Join(h.base, "opt", "tool", "bin")
		appDir := filepath.Join(h.home, ".local", "share", "app", "v1")
		h.writeFile(filepath.Join(wsBin, "wstool"), script, 0o755)
		h.writeFile(filepath.Join(homeBin, "hometool"), script, 0o755)
		h.writeFile(filepath.Join(optBin, "opttool"), script, 0o755)
		h.writeFile(filepath.Join(appDir, "app"), script, 0o755)
		if err := os.Symlink(filepath.Join(appDir, "app"), filepath.Join(homeBin, "linked")); err != nil {
			t.Fatal(err)
		}
		h.writeFile(filepath.Join(h.ws, "abs.sh"), "#!/nonexistent/sh\necho ran\n", 0o755)
		h.writeFile(filepath.Join(h.ws, "env.py"), "#!/usr/bin/env python9\nprint('ran')\n", 0o755)
		h.writeFile(filepath.Join(h.ws, "envtool.sh"), "#!/usr/bin/env wstool\n", 0o755)
		h.writeFile(filepath.Join(h.ws, "plain.sh"), script, 0o644)
		h.chownAll(h.base)
		callerPath := []string{"PATH=" + wsBin + ":" + homeBin + ":/usr/local/bin:/usr/bin:/bin"}
		if h.tier == "gvisor" {
			callerPath[0] += ":" + filepath.Dir(runscPath(t)) // cordon finds runsc on the caller's PATH
		}

		tests := []struct {
			name    string
			command string
			code    int
			want    []string // each in the one line
			notWant []string
			policy  string // "": pol
		}{
			{"inside, outside the PATH", "wstool", 127,
				[]string{"wstool: command not found inside the sandbox", "is at " + wsBin + "/wstool, outside that PATH", "-e PATH=" + wsBin + ":", "env.set: {PATH: <that value>}"},
				[]string{"filesystem.readonly", "-v "}, fixedPath},
			{"on the host, not shown", "hometool", 127,
				[]string{"hometool: command not found inside the sandbox", "is at " + homeBin + "/hometool on the host", "-v " + homeBin + ":ro", "filesystem.readonly: [" + homeBin + "]", "-e PATH=" + homeBin + ":"},
				[]string{"outside that PATH"}, ""},
			{"a path the sandbox does not show", filepath.Join(optBin, "opttool"), 127,
				[]string{"-v " + optBin + ":ro", "filesystem.readonly: [" + optBin + "]"},
				[]string{"-e PATH"}, ""},
			{"a link into another hidden directory", "linked", 127,
				[]string{"-v " + homeBin + ":ro -v " + appDir + ":ro", "filesystem.readonly: [" + homeBin + ", " + appDir + "]"},
				nil, ""},
			{"missing everywhere", "no-such-agent-x", 127,
				[]string{"no-such-agent-x: command not found inside the sandbox", "the host has no no-such-agent-x in your PATH either"},
				[]string{"filesystem.readonly"}, ""},
			{"missing interpreter by path", "./abs.sh", 127,
				[]string{"./abs.sh: its interpreter /nonexistent/sh is not found inside the sandbox", "the host has no /nonexistent/sh either"},
				[]string{"filesystem.readonly"}, ""},
			{"missing interpreter through env", "./env.py", 127,
				[]string{"./env.py: its interpreter python9 is not found inside the sandbox"},
				[]string{"filesystem.readonly"}, ""},
			{"in the caller's PATH and shown: found", "wstool", 0, []string{""}, nil, ""},
			{"interpreter outside the PATH", "./envtool.sh", 127,
				[]string{"./envtool.sh: its interpreter wstool is not found", "wstool is at " + wsBin + "/wstool, outside that PATH", "-e PATH=" + wsBin + ":"},
				nil, fixedPath},
			{"not executable", "./plain.sh", 126,
				[]string{"./plain.sh: cannot be executed inside the sandbox: it has no execute permission (-rw-r--r--)", "chmod +x ./plain.sh"},
				[]string{"not found"}, ""},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				p := pol
				if tc.policy != "" {
					p = tc.policy
				}
				r := h.cordon(callerPath, "", "run", "--policy", p, "--", tc.command)
				line := strings.TrimSpace(r.stderr)
				if r.code != tc.code || strings.Contains(line, "\n") || strings.Contains(r.stdout, "ran") != (tc.code == 0) {
					t.Fatalf("want exit %d and one line, got\n%s", tc.code, r)
				}
				for _, w := range tc.want {
					if !strings.Contains(line, w) {
						t.Errorf("the line lacks %q:\n%s", w, line)
					}
				}
				for _, w := range tc.notWant {
					if strings.Contains(line, w) {
						t.Errorf("the line has %q, which is not the fix here:\n%s", w, line)
					}
				}
			})
		}
	})
}
