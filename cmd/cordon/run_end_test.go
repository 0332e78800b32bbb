//go:build linux

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// idRE matches a run id.
var idRE = regexp.MustCompile(`\d{8}-\d{6}-[0-9a-f]{8}`)

// cordonAs runs cordon as the caller with argv0 as its argv[0], the way a shell passes the name the
// user typed; dirs are put first on the PATH.
func (h *harness) cordonAs(argv0 string, dirs []string, args ...string) result {
	h.t.Helper()
	var env []string
	if len(dirs) > 0 {
		path := strings.Join(dirs, ":") + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
		if h.tier == "gvisor" {
			path += ":" + filepath.Dir(runscPath(h.t)) // cordon finds runsc on the caller's PATH
		}
		env = append(env, "PATH="+path)
	}
	cmd := h.command(env, cordonBin, h.tierArgs(args)...)
	cmd.Args[0] = argv0
	return run(h.t, cmd, "")
}

// endLines returns the lines cordon printed as the run ended, checking that each fits in width
// columns (0: not checked).
func endLines(t *testing.T, r result, width int) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if !strings.HasPrefix(l, "cordon: network: ") && !strings.HasPrefix(l, "cordon: changed ") && !strings.HasPrefix(l, "cordon: no changes") {
			continue
		}
		if width > 0 && len(l) > width {
			t.Errorf("line of %d columns:\n%s", len(l), l)
		}
		out = append(out, l)
	}
	return out
}

// listed is what cordon runs --all -q lists.
func (h *harness) listed() string {
	h.t.Helper()
	r := h.cordon(nil, "", "runs", "--all", "-q")
	if r.code != 0 {
		h.t.Fatalf("runs: %s", r)
	}
	return strings.TrimSpace(r.stdout)
}

// TestRunWithoutChangesIsRemoved: a run that changed nothing leaves nothing behind and says
// nothing; --keep keeps it and says so; a run with changes is kept and its line says how to review
// it, naming it once.
func TestRunWithoutChangesIsRemoved(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		pol := h.policy("")
		r := h.cordon(nil, "", "run", "--policy", pol, "--", "sh", "-c", "cat /dev/null; echo RAN")
		if r.code != 0 || r.stdout != "RAN\n" {
			t.Fatalf("run: %s", r)
		}
		if got := h.listed(); got != "" {
			t.Errorf("a run that changed nothing is left: %q\n%s", got, r)
		}
		if entries, _ := os.ReadDir(filepath.Join(h.home, ".local", "state", "cordon", "runs")); len(entries) > 0 {
			t.Errorf("the state directory holds %v", entries)
		}
		if lines := endLines(t, r, 100); len(lines) > 0 {
			t.Errorf("a removed run without network printed %q", lines)
		}

		r = h.cordon(nil, "", "run", "--keep", "--policy", pol, "--", "true")
		id := h.listed()
		if r.code != 0 || !idRE.MatchString(id) {
			t.Fatalf("--keep did not keep the run (%q):\n%s", id, r)
		}
		if lines := endLines(t, r, 100); len(lines) != 1 || lines[0] != "cordon: no changes; run "+id+" kept (--keep)" {
			t.Errorf("--keep: %q", lines)
		}

		r = h.cordonAs("cordon", []string{filepath.Dir(cordonBin)}, "run", "--policy", pol, "--", "sh", "-c", "echo x > a.txt; echo y > b.txt")
		lines := endLines(t, r, 100)
		m := regexp.MustCompile(`^cordon: changed 2 paths: cordon diff (\S+) \(then apply or discard\)$`).FindStringSubmatch(strings.Join(lines, "\n"))
		if r.code != 0 || m == nil {
			t.Fatalf("a run with changes: want one line naming it once:\n%s", r)
		}
		if strings.Count(r.stderr, m[1]) != 1 || !strings.Contains(h.listed(), m[1]) {
			t.Errorf("run %s named more than once or not kept:\n%s", m[1], r)
		}
	})
}

// TestRunWithNetworkEnd: a run that changed nothing but whose requests the gateway refused is kept
// so that cordon log shows them, as its line says; one whose gateway refused nothing goes with its
// audit log, and its line says that.
func TestRunWithNetworkEnd(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		pol := h.policy("network:\n  allow: [allowed.test]\n")
		path := []string{filepath.Dir(cordonBin)}
		r := h.cordonAs("cordon", path, "run", "--policy", pol, "--", "sh", "-c", "getent hosts evil.test; true")
		lines := endLines(t, r, 100)
		if len(lines) != 2 {
			t.Fatalf("want two lines at the end of the run:\n%s", r)
		}
		m := regexp.MustCompile(`^cordon: no changes; kept \(its audit log flags requests\): cordon log (\S+)$`).FindStringSubmatch(lines[1])
		if r.code != 0 || m == nil || !regexp.MustCompile(`^cordon: network: 0 allowed, [1-9]\d* denied`).MatchString(lines[0]) {
			t.Fatalf("a run with a refusal: want the summary and the log to read:\n%s", r)
		}
		if l := h.cordon(nil, "", "log", "--denied", m[1]); l.code != 0 || !strings.Contains(l.stdout, "evil.test") {
			t.Errorf("cordon log of the kept run:\n%s", l)
		}
		if err := os.RemoveAll(filepath.Join(h.home, ".local", "state", "cordon", "runs", m[1])); err != nil {
			t.Fatal(err)
		}

		r = h.cordonAs("cordon", path, "run", "--policy", pol, "--", "true")
		lines = endLines(t, r, 100)
		if r.code != 0 || len(lines) != 2 || lines[1] != "cordon: no changes: the run and its audit log were removed (--keep keeps them)" {
			t.Fatalf("a run whose gateway refused nothing: %q\n%s", lines, r)
		}
		if got := h.listed(); got != "" {
			t.Errorf("the run is left: %q", got)
		}
	})
}

// TestUnchangedRunKeepsItsMaskedList: the start line names the run's list of every masked file when
// it cannot name them all; that list lives in the run, so the run stays although it changed
// nothing. A run whose line named every masked file has nothing to point to and goes.
func TestUnchangedRunKeepsItsMaskedList(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		h.writeFile(filepath.Join(h.ws, "a.env"), "DB=mysql://root:"+"pw1@db.corp.io/x\n", 0o644)
		pol := h.policy("")
		r := h.cordon(nil, "", "run", "--policy", pol, "--", "true")
		if got := h.listed(); r.code != 0 || got != "" || !strings.Contains(r.stderr, "masked 1 secret-shaped file") {
			t.Fatalf("one masked file, named: want the run removed (left: %q):\n%s", got, r)
		}
		for _, n := range []string{"b.env", "c.env", "d.env"} {
			h.writeFile(filepath.Join(h.ws, n), "DB=mysql://root:"+"pw2@db.corp.io/x\n", 0o644)
		}
		r = h.cordon(nil, "", "run", "--policy", pol, "--", "true")
		m := regexp.MustCompile(`and 1 more, all in (\S+)`).FindStringSubmatch(r.stderr)
		if r.code != 0 || m == nil {
			t.Fatalf("four masked files: want the line to name the list:\n%s", r)
		}
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("the list the start line names is gone: %v", err)
		}
		id := h.listed()
		if lines := endLines(t, r, 100); !idRE.MatchString(id) || lines[len(lines)-1] != "cordon: no changes; run "+id+" kept (it lists the masked files)" {
			t.Errorf("want the run kept and its line saying why (runs: %q):\n%s", id, r)
		}
	})
}

// TestEndOfRunNamesCordonAsInvoked: the command the end-of-run line suggests is spelled as the user
// invoked cordon: a relative path as typed, a name the PATH found (a symlink's name, not its
// target's), and the base name when the full path given is what the PATH finds.
func TestEndOfRunNamesCordonAsInvoked(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		bin := filepath.Join(h.ws, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(cordonBin, filepath.Join(bin, "agentbox")); err != nil {
			t.Fatal(err)
		}
		h.chownAll(bin)
		pol := h.policy("")
		for _, tc := range []struct {
			argv0 string
			path  []string
			want  string
		}{
			{"bin/agentbox", nil, "bin/agentbox"},
			{"./bin/agentbox", nil, "./bin/agentbox"},
			{"agentbox", []string{bin}, "agentbox"},
			{filepath.Join(bin, "agentbox"), []string{bin}, "agentbox"},
			{filepath.Join(bin, "agentbox"), nil, filepath.Join(bin, "agentbox")},
		} {
			r := h.cordonAs(tc.argv0, tc.path, "run", "--policy", pol, "--", "sh", "-c", "echo x >> out.txt")
			width := 100
			if filepath.IsAbs(tc.want) {
				width = 0 // the test's long temporary directory is not the line's to shorten
			}
			lines := endLines(t, r, width)
			re := regexp.MustCompile(`^cordon: changed 1 path: ` + regexp.QuoteMeta(tc.want) + ` diff ` + idRE.String() + ` \(then apply or discard\)$`)
			if r.code != 0 || len(lines) != 1 || !re.MatchString(lines[0]) {
				t.Errorf("invoked as %q (PATH %v): want %q diff ID:\n%s", tc.argv0, tc.path, tc.want, r)
			}
		}
	})
}
