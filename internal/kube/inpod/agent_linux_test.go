//go:build linux

package inpod

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// checkout is a test's repository cloned by Clone at main, as the clone step leaves it.
type checkout struct {
	repo      *testRepo
	dir, base string
}

func newCheckout(t *testing.T) *checkout {
	t.Helper()
	r := newTestRepo(t)
	dir := filepath.Join(t.TempDir(), "src")
	base, err := Clone(context.Background(), CloneOptions{Repo: r.serve(t, smartV2), Ref: "main", Dir: dir, Env: cloneEnv})
	if err != nil {
		t.Fatal(err)
	}
	return &checkout{repo: r, dir: dir, base: base}
}

// agentEnv is the wrapper's environment in the tests.
func agentEnv(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent"}, extra...)
}

// script runs sh -c s as the agent's command.
func script(s string) []string { return []string{"sh", "-c", s} }

// applied applies the wrapper's patch to a fresh clone of the repository at the base and returns
// the clone's directory: `git apply --check` must pass first.
func (c *checkout) applied(t *testing.T, patch string) string {
	t.Helper()
	fresh := filepath.Join(t.TempDir(), "fresh")
	git(t, c.repo.root, "clone", "-q", filepath.Join(c.repo.root, "srv.git"), fresh)
	git(t, fresh, "checkout", "-q", "--detach", c.base)
	pf := filepath.Join(t.TempDir(), "changes.patch")
	if err := os.WriteFile(pf, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, fresh, "apply", "--check", pf)
	git(t, fresh, "apply", pf)
	return fresh
}

// manifest describes a working tree file by file (type, executable bit, contents or link target),
// leaving out .git and the paths skip names.
func manifest(t *testing.T, dir string, skip ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, s := range append([]string{".git"}, skip...) {
			if rel == s {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] = "link " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = map[bool]string{true: "exec ", false: "file "}[fi.Mode()&0o100 != 0] + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sameTree fails the test when the two manifests differ, naming each path that does.
func sameTree(t *testing.T, got, want map[string]string) {
	t.Helper()
	var paths []string
	for p := range want {
		paths = append(paths, p)
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		if got[p] != want[p] {
			t.Errorf("%s: the patched clone has %q, the agent's tree %q", p, got[p], want[p])
		}
	}
}

// runAgent runs c to its end with stdin given and returns the report and the child's stdout.
func runAgent(t *testing.T, c agentChild, stdin io.Reader) (*agentRun, agentReport, string) {
	t.Helper()
	r := agentCmd(t, c)
	var stdout, stderr bytes.Buffer
	r.Stdin, r.Stdout, r.Stderr = stdin, &stdout, &stderr
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	rep := r.report(t)
	if stderr.Len() > 0 {
		t.Logf("stderr:\n%s", stderr.String())
	}
	return r, rep, stdout.String()
}

// status reads the wrapper's status file.
func (r *agentRun) status(t *testing.T) *kubepod.Status {
	t.Helper()
	s, ok := r.outFile(t, kubepod.StatusFile)
	if !ok {
		return nil
	}
	var st kubepod.Status
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		t.Fatalf("status %q: %v", s, err)
	}
	return &st
}

// TestAgentPatch: the command edits, adds (text and binary, in new directories, a name with a
// space), deletes, chmods, retargets a symbolic link and ignores files, one of them tracked, then
// exits 3. The wrapper exits 3 too; the patch passes `git apply --check` on a fresh clone at the
// base and reproduces the agent's tree exactly there (the ignored untracked directory aside);
// the status names the base (no --base was given: the checkout's HEAD) and no error.
func TestAgentPatch(t *testing.T) {
	c := newCheckout(t)
	// No base given, as in the pod: the checkout's HEAD as the wrapper starts.
	r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Env: agentEnv(), Args: script(`set -e
echo changed >> README && chmod +x README
printf 'new\n' > added.txt && mkdir -p deep/er && echo x > deep/er/f.txt && echo s > 'sp ace.txt'
printf '\000\001\002\003binary\377' > blob.bin
printf 'more\000' >> data.bin
rm src/main.go
chmod -x src 2>/dev/null || true; chmod +x src
rm readme.link && ln -s added.txt readme.link && ln -s deep new.link
printf '*.log\nignored/\n' > .gitignore
echo changed > keep.log
mkdir ignored && echo i > ignored/x
exit 3`)}, nil)
	if rep.Code != 3 || rep.Err != "" {
		t.Fatalf("wrapper: code %d, error %q; want 3 and none", rep.Code, rep.Err)
	}
	st := r.status(t)
	if st == nil || st.Version != kubepod.Version || st.Base != c.base || st.PatchError != "" {
		t.Fatalf("status %+v, want version %d, base %s, no error", st, kubepod.Version, c.base)
	}
	patch, ok := r.outFile(t, kubepod.PatchFile)
	if !ok {
		t.Fatal("no patch")
	}
	for _, want := range []string{"GIT binary patch", "old mode 100644\nnew mode 100755", "deleted file mode 100755",
		"diff --git a/keep.log b/keep.log", "new file mode 120000"} {
		if !strings.Contains(patch, want) {
			t.Errorf("the patch has no %q:\n%s", want, patch)
		}
	}
	if strings.Contains(patch, "ignored/x") {
		t.Errorf("the patch has the ignored untracked file:\n%s", patch)
	}
	fresh := c.applied(t, patch)
	sameTree(t, manifest(t, fresh), manifest(t, c.dir, "ignored"))
}

// TestAgentNoChanges: a command that changes nothing leaves an empty patch, which is a patch.
func TestAgentNoChanges(t *testing.T) {
	c := newCheckout(t)
	r, rep, out := runAgent(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv(), Args: []string{"echo", "hello"}}, nil)
	if rep.Code != 0 || rep.Err != "" || out != "hello\n" {
		t.Fatalf("code %d, error %q, stdout %q", rep.Code, rep.Err, out)
	}
	if patch, ok := r.outFile(t, kubepod.PatchFile); !ok || patch != "" {
		t.Errorf("patch %q (present %v), want an empty one", patch, ok)
	}
}

// TestAgentLeftovers: the command leaves a background loop appending to a file, a sleep in a
// session of its own, an orphaned double fork and a process that ignores every signal it can. When
// the wrapper is done none of them is alive, and the file in the patch is the file in the tree: no
// write came after the patch was made.
func TestAgentLeftovers(t *testing.T) {
	c := newCheckout(t)
	r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv(), Args: script(`
(while :; do echo x >> bg.log; done) &
while [ ! -s bg.log ]; do :; done
setsid sleep 100 &
sh -c 'sleep 101 & exit 0'
(trap '' TERM INT HUP; exec sleep 102) &
exit 0`)}, nil)
	if rep.Code != 0 || rep.Err != "" {
		t.Fatalf("code %d, error %q", rep.Code, rep.Err)
	}
	if len(rep.Alive) > 0 {
		t.Errorf("alive after the wrapper was done: %q", rep.Alive)
	}
	patch, _ := r.outFile(t, kubepod.PatchFile)
	if !strings.Contains(patch, "b/bg.log") {
		t.Fatalf("bg.log is not in the patch:\n%s", patch)
	}
	sameTree(t, manifest(t, c.applied(t, patch)), manifest(t, c.dir))
}

// TestAgentKillsNonDescendants: a process that entered the container's pid namespace from outside
// (as an exec into the container does) is not the command's descendant; it is killed and waited
// for all the same.
func TestAgentKillsNonDescendants(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Fatalf("nsenter (util-linux) is not installed: %v", err)
	}
	c := newCheckout(t)
	r := agentCmd(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv(), Args: script(`echo ready; read x; echo done`)})
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := r.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Stdin = stdinR
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	stdinR.Close()
	lines := bufio.NewReader(stdout)
	if l, err := lines.ReadString('\n'); l != "ready\n" {
		t.Fatalf("command said %q, %v", l, err)
	}
	intruder := exec.Command("nsenter", "-t", strconv.Itoa(r.Process.Pid), "-p", "-m", "--", "sh", "-c", "echo in; exec sleep 103")
	in, err := intruder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := intruder.Start(); err != nil {
		t.Fatal(err)
	}
	if l, _ := bufio.NewReader(in).ReadString('\n'); l != "in\n" {
		t.Fatalf("the intruder said %q", l)
	}
	stdinW.Write([]byte("go\n"))
	stdinW.Close()
	io.Copy(io.Discard, lines)
	rep := r.report(t)
	if rep.Code != 0 || rep.Err != "" {
		t.Fatalf("code %d, error %q", rep.Code, rep.Err)
	}
	if len(rep.Alive) > 0 {
		t.Errorf("alive after the wrapper was done: %q", rep.Alive)
	}
	err = intruder.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		// nsenter reports its child's end as its own
		if ok && ee.ExitCode() == 128+int(syscall.SIGKILL) {
			return
		}
		t.Errorf("the intruder ended with %v, want SIGKILL", err)
	}
}

// TestAgentSignals: SIGTERM, SIGINT and SIGHUP sent to the wrapper reach the command, which traps
// them and exits 7; a command that does not trap SIGTERM dies of it and the wrapper exits 143.
func TestAgentSignals(t *testing.T) {
	c := newCheckout(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		cmd  string
		code int
	}{
		{syscall.SIGTERM, `trap 'echo got; exit 7' TERM; echo ready; sleep 104 & wait`, 7},
		{syscall.SIGINT, `trap 'echo got; exit 7' INT; echo ready; sleep 104 & wait`, 7},
		{syscall.SIGHUP, `trap 'echo got; exit 7' HUP; echo ready; sleep 104 & wait`, 7},
		{syscall.SIGTERM, `echo ready; exec sleep 104`, 128 + int(syscall.SIGTERM)},
	} {
		t.Run(tc.sig.String()+"/"+strconv.Itoa(tc.code), func(t *testing.T) {
			r := agentCmd(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv(), Args: script(tc.cmd)})
			stdout, err := r.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewReader(stdout)
			if l, err := lines.ReadString('\n'); l != "ready\n" {
				t.Fatalf("command said %q, %v", l, err)
			}
			if err := r.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(lines)
			rep := r.report(t)
			if rep.Code != tc.code {
				t.Errorf("code %d, want %d (error %q)", rep.Code, tc.code, rep.Err)
			}
			if tc.code == 7 && string(rest) != "got\n" {
				t.Errorf("the command said %q after the signal, want got", rest)
			}
			if st := r.status(t); st == nil || st.PatchError != "" {
				t.Errorf("status %+v", st)
			}
		})
	}
}

// TestAgentHello: with --attach the wrapper takes exactly the hello from stdin and the command gets
// the rest, so its output is all there is and the hello never appears in it. A wrong hello, a cut
// one, or a wrong first byte on a stdin that stays open is refused at once: nothing runs, nothing is
// written to OutDir.
func TestAgentHello(t *testing.T) {
	c := newCheckout(t)
	t.Run("hello", func(t *testing.T) {
		_, rep, out := runAgent(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv(), Attach: true,
			Args: script(`echo out; cat`)}, strings.NewReader(kubepod.AttachHello+"input\n"))
		if rep.Code != 0 || out != "out\ninput\n" {
			t.Errorf("code %d (%q), stdout %q; want out, input", rep.Code, rep.Err, out)
		}
	})
	marker := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct {
		name  string
		stdin string
		open  bool // the stdin stays open after it
	}{
		{"wrong", strings.Replace(kubepod.AttachHello, "v1", "v2", 1) + "input\n", false},
		{"cut", kubepod.AttachHello[:5], false},
		{"empty", "", false},
		{"wrong first byte, stdin open", "X", true},
		{"wrong last byte, stdin open", kubepod.AttachHello[:len(kubepod.AttachHello)-1] + "\r", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdinR, stdinW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdinW.Close()
			stdinW.Write([]byte(tc.stdin))
			if !tc.open {
				stdinW.Close()
			}
			r, rep, out := runAgent(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv(), Attach: true,
				Args: script("touch " + marker + "; echo ran")}, stdinR)
			stdinR.Close()
			if rep.Code != exitWrapper || !strings.Contains(rep.Err, "attach hello") || out != "" {
				t.Errorf("code %d, error %q, stdout %q; want %d and the hello refused", rep.Code, rep.Err, out, exitWrapper)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran")
			}
			if _, ok := r.outFile(t, kubepod.StatusFile); ok {
				t.Error("a status was written")
			}
		})
	}
}

// TestAgentTerminal: a terminal on stdin (the wrapper's controlling terminal, as in a pod with a
// tty) is the command's: /dev/tty opens, and the command has a process group of its own that is the
// terminal's foreground group (so a ^C typed reaches the command once, not the wrapper too, which
// would forward it a second time).
// The hello is read raw: it is not echoed, so the terminal shows only what the command wrote and
// the echo of what was typed after the hello.
func TestAgentTerminal(t *testing.T) {
	c := newCheckout(t)
	for _, tc := range []struct {
		name string
		ctty bool // the terminal is the wrapper's controlling terminal; else it belongs to no session
	}{{"the wrapper's terminal", true}, {"a terminal of no session", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ptm, tty, err := pty.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer ptm.Close()
			waitR, waitW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			r := agentCmd(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv(), Attach: true, HelloFD: true, Args: script(`
exec 3</dev/tty && echo CTTY
read -r _ _ _ _ pgrp _ _ tpgid _ < /proc/$$/stat; [ "$pgrp" = "$tpgid" ] && [ "$pgrp" = "$$" ] && echo FOREGROUND
read line; echo "got:$line"`)})
			r.Stdin, r.Stdout, r.Stderr = tty, tty, tty
			r.ExtraFiles = []*os.File{waitW}
			r.SysProcAttr.Setsid, r.SysProcAttr.Setctty, r.SysProcAttr.Ctty = true, tc.ctty, 0
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			tty.Close()
			waitW.Close()
			if _, err := waitR.Read(make([]byte, 1)); err != nil {
				t.Fatalf("the wrapper did not wait for the hello: %v", err)
			}
			if _, err := ptm.Write([]byte(kubepod.AttachHello + "input\n")); err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(ptm) // EIO once the terminal's last user is gone
			rep := r.report(t)
			if rep.Code != 0 || rep.Err != "" {
				t.Fatalf("code %d, error %q\n%s", rep.Code, rep.Err, out)
			}
			for _, want := range []string{"CTTY", "FOREGROUND", "got:input"} {
				if !bytes.Contains(out, []byte(want)) {
					t.Errorf("the terminal shows no %s:\n%q", want, out)
				}
			}
			if bytes.Contains(out, []byte("cordon-attach")) {
				t.Errorf("the hello was echoed:\n%q", out)
			}
		})
	}
}

// TestAgentPlanted: the command plants what would make the git that makes the patch run its
// programs or misread the tree: a filter and an fsmonitor in ~/.gitconfig, in the XDG config, in
// .git/config and in a file .git/config includes, an attributes file naming the filter (the user's,
// .git/info/attributes, .gitattributes), the user's ignore file, and a .git/commondir pointing at a
// repository of its own. Nothing it planted runs, and the patch still reproduces its tree.
func TestAgentPlanted(t *testing.T) {
	for _, tc := range []struct{ name, plant string }{
		{"home config", `printf '[filter "evil"]\n\tclean = %s home-filter\n[core]\n\tfsmonitor = %s home-fsmonitor\n' "$EVIL" "$EVIL" > "$HOME/.gitconfig"
printf '* filter=evil\n' > .gitattributes`},
		{"xdg config", `mkdir -p "$HOME/.config/git"
printf '[filter "evil"]\n\tclean = %s xdg-filter\n[core]\n\tfsmonitor = %s xdg-fsmonitor\n' "$EVIL" "$EVIL" > "$HOME/.config/git/config"
printf '* filter=evil\n' > "$HOME/.config/git/attributes"; printf '*.txt\n' > "$HOME/.config/git/ignore"`},
		{"repo config", `printf '[filter "evil"]\n\tclean = %s repo-filter\n[core]\n\tfsmonitor = %s repo-fsmonitor\n\tuntrackedCache = true\n' "$EVIL" "$EVIL" >> .git/config
mkdir -p .git/info && printf '* filter=evil\n' > .git/info/attributes && printf '*.txt\n' > .git/info/exclude`},
		{"include", `printf '[filter "evil"]\n\tclean = %s include-filter\n' "$EVIL" > "$HOME/inc"
printf '[include]\n\tpath = %s\n' "$HOME/inc" >> .git/config; printf '*.md filter=evil\n' > .gitattributes`},
		{"commondir", `mkdir -p "$HOME/common" && cp -r .git/objects .git/refs "$HOME/common/" && echo "$HOME/common" > .git/commondir
printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = %s commondir-fsmonitor\n[filter "evil"]\n\tclean = %s commondir-filter\n' "$EVIL" "$EVIL" > "$HOME/common/config"
printf '* filter=evil\n' > .gitattributes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCheckout(t)
			home, marks := t.TempDir(), t.TempDir()
			evil := filepath.Join(marks, "evil.sh")
			if err := os.WriteFile(evil, []byte("#!/bin/sh\ntouch \""+marks+"/ran-$1\"\ncat\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv("HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "EVIL="+evil),
				Args: script("set -e\n" + tc.plant + "\necho new > new.txt; echo notes > notes.md; echo more >> README")}, nil)
			if rep.Code != 0 || rep.Err != "" {
				t.Fatalf("code %d, error %q", rep.Code, rep.Err)
			}
			ran, _ := filepath.Glob(filepath.Join(marks, "ran-*"))
			for _, m := range ran {
				t.Errorf("the patch's git ran what the command planted: %s", filepath.Base(m))
			}
			patch, ok := r.outFile(t, kubepod.PatchFile)
			if !ok {
				t.Fatalf("no patch; status %+v", r.status(t))
			}
			sameTree(t, manifest(t, c.applied(t, patch)), manifest(t, c.dir))
		})
	}
}

// TestAgentResults: what the command leaves in OutDir is not taken for the wrapper's (a forged
// status, a patch that is a symbolic link); a checkout whose object store is gone gives a status
// with the patch's error and no patch (not even the one the command wrote), while the exit code
// stays the command's; a command that is
// not there exits 127 with an empty patch; a base that is not a commit hash, or no base and a HEAD
// that is not detached, runs nothing.
func TestAgentResults(t *testing.T) {
	c := newCheckout(t)
	t.Run("planted results", func(t *testing.T) {
		out := t.TempDir()
		r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Base: c.base, OutDir: out, Env: agentEnv(), Args: script(
			`printf '{"version":1,"base":"forged"}' > ` + out + `/status.json; ln -s /etc/passwd ` + out + `/changes.patch; echo x >> README`)}, nil)
		if rep.Code != 0 || rep.Err != "" {
			t.Fatalf("code %d, error %q", rep.Code, rep.Err)
		}
		if st := r.status(t); st == nil || st.Base != c.base {
			t.Errorf("status %+v, want base %s", st, c.base)
		}
		fi, err := os.Lstat(filepath.Join(out, kubepod.PatchFile))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("patch: %v, %v", fi, err)
		}
		if patch, _ := r.outFile(t, kubepod.PatchFile); !strings.Contains(patch, "b/README") {
			t.Errorf("patch %q", patch)
		}
	})
	t.Run("no object store", func(t *testing.T) {
		c := newCheckout(t)
		out := t.TempDir()
		r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Base: c.base, OutDir: out, Env: agentEnv(), Args: script(
			`rm -rf .git; echo forged > ` + out + `/changes.patch; exit 4`)}, nil)
		st := r.status(t)
		if rep.Code != 4 || st == nil || !strings.Contains(st.PatchError, "no object store") || !strings.Contains(rep.Err, "no object store") {
			t.Errorf("code %d, error %q, status %+v", rep.Code, rep.Err, st)
		}
		if _, ok := r.outFile(t, kubepod.PatchFile); ok {
			t.Error("a patch was written")
		}
	})
	t.Run("no such command", func(t *testing.T) {
		c := newCheckout(t)
		r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Base: c.base, Env: agentEnv(), Args: []string{"no-such-command-here"}}, nil)
		if rep.Code != exitNotFound || !strings.Contains(rep.Err, "not found") {
			t.Errorf("code %d, error %q", rep.Code, rep.Err)
		}
		if patch, ok := r.outFile(t, kubepod.PatchFile); !ok || patch != "" {
			t.Errorf("patch %q (%v), want an empty one", patch, ok)
		}
	})
	t.Run("bad base", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "ran")
		for _, base := range []string{"main", "--output=/tmp/x", strings.ToUpper(c.base), c.base[:12]} {
			r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Base: base, Env: agentEnv(), Args: script("touch " + marker)}, nil)
			if rep.Code != exitWrapper || !strings.Contains(rep.Err, "not a full commit hash") {
				t.Errorf("base %q: code %d, error %q", base, rep.Code, rep.Err)
			}
			if _, ok := r.outFile(t, kubepod.StatusFile); ok {
				t.Errorf("base %q: a status was written", base)
			}
		}
		// No base given and a HEAD that is not detached: the clone step did not leave it so.
		attached := newCheckout(t)
		if err := os.WriteFile(filepath.Join(attached.dir, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r, rep, _ := runAgent(t, agentChild{Dir: attached.dir, Env: agentEnv(), Args: script("touch " + marker)}, nil)
		if rep.Code != exitWrapper || !strings.Contains(rep.Err, "not a detached commit") {
			t.Errorf("attached HEAD: code %d, error %q", rep.Code, rep.Err)
		}
		if _, ok := r.outFile(t, kubepod.StatusFile); ok {
			t.Error("attached HEAD: a status was written")
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the command ran")
		}
	})
}

// TestAgentStopped: the gateway's stop file (the run's lease lapsed) ends a command that would run
// for ten minutes, and its leftovers, as a timeout would: the changes it made so far are the patch,
// the status says why it was stopped, nothing is left alive. Before the attach hello, the stop
// ends the wrapper with nothing run. Without the wrapper's watch, both runs go on to the test's
// deadline.
func TestAgentStopped(t *testing.T) {
	const reason = "no heartbeat from cordon for 5s (the lease is 5s): test"
	stopFile := func(t *testing.T, dir string) {
		t.Helper()
		// Whole or not at all, as the gateway writes it (stopRun): the wrapper may look in between.
		if err := stopRun(dir, reason); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(t *testing.T, r *agentRun) agentReport {
		t.Helper()
		exited := make(chan error, 1)
		go func() { exited <- r.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("agent child: %v", err)
			}
			return r.readReport(t)
		case <-time.After(time.Minute):
			_ = r.Process.Kill()
			<-exited
			t.Fatal("the wrapper did not stop the command within a minute of the stop file")
			return agentReport{}
		}
	}

	t.Run("running", func(t *testing.T) {
		c := newCheckout(t)
		stop := t.TempDir()
		r := agentCmd(t, agentChild{Dir: c.dir, Base: c.base, StopDir: stop, Env: agentEnv(), Args: script(`
echo changed >> README
(trap '' TERM INT HUP; exec sleep 601) &
touch started
exec sleep 600`)})
		var stderr bytes.Buffer
		r.Stderr = &stderr
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(c.dir, "started")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				_ = r.Process.Kill()
				t.Fatalf("the command did not start:\n%s", stderr.String())
			}
		}
		stopFile(t, stop)
		rep := wait(t, r)
		if rep.Code != 128+int(syscall.SIGKILL) || rep.Err != "" {
			t.Fatalf("wrapper: code %d, error %q; want %d (the command killed) and none\n%s", rep.Code, rep.Err, 128+int(syscall.SIGKILL), stderr.String())
		}
		if len(rep.Alive) > 0 {
			t.Errorf("alive after the wrapper was done: %q", rep.Alive)
		}
		st := r.status(t)
		if st == nil || st.Stopped != reason || st.PatchError != "" {
			t.Fatalf("status %+v, want Stopped %q and no patch error", st, reason)
		}
		patch, _ := r.outFile(t, kubepod.PatchFile)
		if !strings.Contains(patch, "b/README") || !strings.Contains(patch, "+changed") {
			t.Errorf("the patch lacks the change made before the stop:\n%s", patch)
		}
	})

	t.Run("before the hello", func(t *testing.T) {
		c := newCheckout(t)
		stop := t.TempDir()
		ran := filepath.Join(c.dir, "ran")
		r := agentCmd(t, agentChild{Dir: c.dir, Base: c.base, StopDir: stop, Attach: true, HelloFD: true, Env: agentEnv(), Args: script("touch " + ran)})
		stdin, w, err := os.Pipe() // never written: cordon never attached
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		hr, hw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Stdin, r.ExtraFiles = stdin, []*os.File{hw}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		stdin.Close()
		hw.Close()
		if _, err := hr.Read(make([]byte, 1)); err != nil {
			t.Fatalf("the wrapper never waited for the hello: %v", err)
		}
		hr.Close()
		stopFile(t, stop)
		rep := wait(t, r)
		if rep.Code != exitWrapper || !strings.Contains(rep.Err, "nothing was run") {
			t.Fatalf("wrapper: code %d, error %q; want %d and nothing run", rep.Code, rep.Err, exitWrapper)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Error("the command ran although cordon never attached")
		}
		if st := r.status(t); st == nil || st.Stopped != reason {
			t.Errorf("status %+v, want Stopped %q", st, reason)
		}
		if _, ok := r.outFile(t, kubepod.PatchFile); ok {
			t.Error("a patch was made for a command that never ran")
		}
	})
}

// TestAgentSurvivesItsCommand: the command runs as the wrapper's uid and signals it (pid 1) with
// every signal that ends an uncaught Go process, after planting a status of its own; the wrapper
// lives on, removes the plant and writes its own status and patch. Without the catch-all, SIGQUIT ends the wrapper (exit 2) and the
// planted status stays. (That the wrapper is not dumpable shows only to a command of another uid
// than root, which this test's child is not.)
func TestAgentSurvivesItsCommand(t *testing.T) {
	c := newCheckout(t)
	out := t.TempDir()
	r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Base: c.base, OutDir: out, Env: agentEnv(), Args: script(`
printf '{"version":1,"base":"forged","stopped":"forged"}' > ` + out + `/status.json
for s in QUIT ABRT SEGV BUS FPE ILL TRAP SYS USR1 USR2 PIPE ALRM; do kill -$s 1; done
sleep 0.2
echo changed >> README
exit 0`)}, nil)
	if rep.Code != 0 || rep.Err != "" {
		t.Fatalf("wrapper: code %d, error %q; want 0 and none (it survived its command's signals)", rep.Code, rep.Err)
	}
	st := r.status(t)
	if st == nil || st.Base != c.base || st.Stopped != "" {
		t.Fatalf("status %+v: want the wrapper's own (base %s, not stopped)", st, c.base)
	}
	if patch, _ := r.outFile(t, kubepod.PatchFile); !strings.Contains(patch, "+changed") {
		t.Errorf("the patch lacks the command's change:\n%s", patch)
	}
}

// TestAgentPatchGitNotFromPATH: the command plants a git in a directory of its PATH that it can
// write; the patch is made by the image's git all the same, and the plant never runs. Looked up on
// the command's PATH after it ended, the plant ran (three times) with nothing left to stop it.
func TestAgentPatchGitNotFromPATH(t *testing.T) {
	c := newCheckout(t)
	plant := t.TempDir()
	ran := filepath.Join(t.TempDir(), "ran")
	r, rep, _ := runAgent(t, agentChild{Dir: c.dir, Base: c.base, Env: append(agentEnv(), "PATH="+plant+":/usr/bin:/bin"), Args: script(`
printf '#!/bin/sh\necho "$@" >> ` + ran + `\nexec /usr/bin/git "$@"\n' > ` + plant + `/git
chmod +x ` + plant + `/git
echo changed >> README`)}, nil)
	if rep.Code != 0 || rep.Err != "" {
		t.Fatalf("wrapper: code %d, error %q", rep.Code, rep.Err)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Errorf("the planted git ran when the patch was made: %q", b)
	}
	if patch, _ := r.outFile(t, kubepod.PatchFile); !strings.Contains(patch, "+changed") {
		t.Errorf("the patch lacks the change:\n%s", patch)
	}
}
