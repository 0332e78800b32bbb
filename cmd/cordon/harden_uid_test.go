//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
)

// Issue 11, item 15: when cordon runs as root, the agent must not be host root. These tests attack
// from inside real sandboxes what the agent reaches of the host (a writable policy path, a
// descriptor it inherits, a host device node bound in /dev) and judge by the host's own view of
// those files, then check that the workspace cycle still carries the caller's ownership.

// owner is the host owner of path (not following a final symlink).
func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// grantAgentWrite gives the agent write access to a readwrite path, the way the docs tell a root
// user to: as root the agent writes as cordon's reserved host uid, so the path is chowned to it.
// Rootless, the agent writes as the caller, who owns the path already.
func (h *harness) grantAgentWrite(path string) {
	h.t.Helper()
	if h.who.uid != 0 {
		return
	}
	uid, gid, err := linux.RootSandboxIDs(sandbox.User{UID: 1000, GID: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, uid, gid)
		}
		return err
	})
}

// statOf is path's inode as stat(2) gives it.
func statOf(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

// TestUIDAgentIsNotHostRoot: a root-owned file in a readwrite policy path is neither written nor
// chmod-ed, a root-owned directory (group-writable by root's group, so that root's supplementary
// groups count too) takes no new file, a root-owned file the agent holds as its stdout is not
// chmod-ed through /proc/self/fd, and the host's /dev/null bound in /dev is not chmod-ed; a file the
// agent makes in a world-writable path lands on the host owned by an id that is not 0 and no
// account's. Before this change, as root, every attack succeeded: the agent was host uid 0.
func TestUIDAgentIsNotHostRoot(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		rootDir, shared := filepath.Join(h.base, "rootowned"), filepath.Join(h.base, "shared")
		h.writeFile(filepath.Join(rootDir, "root.txt"), "root-"+h.canary+"\n", 0o644)
		if err := os.MkdirAll(shared, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{rootDir, filepath.Join(rootDir, "root.txt")} {
			if err := os.Chown(p, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		os.Chmod(rootDir, 0o775)
		os.Chmod(shared, 0o1777)
		out := filepath.Join(h.base, "stdout.log")
		if err := os.WriteFile(out, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chown(out, 0, 0)
		stdout, err := os.OpenFile(out, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer stdout.Close()
		devNull := statOf(t, "/dev/null")

		pol := h.policy(fmt.Sprintf("filesystem:\n  readwrite: [%q, %q]\n", rootDir, shared))
		script := fmt.Sprintf(`cat /proc/self/uid_map /proc/self/gid_map >&2
echo x >> %[1]s/root.txt 2>/dev/null && echo WROTE >&2
chmod 666 %[1]s/root.txt 2>/dev/null && echo CHMOD >&2
touch %[1]s/planted 2>/dev/null && echo PLANTED >&2
chmod 600 /proc/self/fd/1 2>/dev/null && echo FD-CHMOD >&2
chmod 666 /dev/null 2>/dev/null && echo DEVNULL-CHMOD >&2
echo made > %[2]s/mine && echo SHARED-OK >&2`, rootDir, shared)
		cmd := h.command(nil, cordonBin, h.tierArgs([]string{"run", "--policy", pol, "--", "sh", "-c", script})...)
		if h.who.uid == 0 {
			// A root login shell has root's group as a supplementary group too; the agent must not
			// keep it (the root-owned directory above is group-writable).
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{0}}}
		}
		var errb bytes.Buffer
		cmd.Stdout, cmd.Stderr, cmd.WaitDelay = stdout, &errb, 10*time.Second
		if err := cmd.Run(); err != nil {
			t.Fatalf("cordon run: %v\n%s", err, errb.String())
		}
		said := errb.String()

		// The host's record, not what the agent says.
		if b, _ := os.ReadFile(filepath.Join(rootDir, "root.txt")); string(b) != "root-"+h.canary+"\n" {
			t.Errorf("a root-owned file in a readwrite path was written: %q\n%s", b, said)
		}
		if fi, err := os.Stat(filepath.Join(rootDir, "root.txt")); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("a root-owned file in a readwrite path was chmod-ed: %v %v\n%s", fi.Mode(), err, said)
		}
		if _, err := os.Lstat(filepath.Join(rootDir, "planted")); err == nil {
			t.Errorf("a file was created in a root-owned directory\n%s", said)
		}
		if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("the root-owned file inherited as stdout was chmod-ed: %v %v\n%s", fi.Mode(), err, said)
		}
		// The host's /dev/null keeps its mode and owner. (Not its change time: root processes of the
		// host that other packages' tests run beside this one move it; starting a gVisor pod in the
		// Kubernetes test bed does, seen with kubee2e:TestKubeGVisorRuntimeClass. A chmod to the same
		// mode that succeeded is the agent's DEVNULL-CHMOD below: the kernel's answer to it.)
		if now := statOf(t, "/dev/null"); now.Mode != devNull.Mode || now.Uid != devNull.Uid || now.Gid != devNull.Gid {
			t.Errorf("the host's /dev/null was changed from inside: mode %o uid %d gid %d, was %o %d %d\n%s",
				now.Mode, now.Uid, now.Gid, devNull.Mode, devNull.Uid, devNull.Gid, said)
		}
		// The control: the same kind of write succeeds where the host allows it, and shows who the
		// agent is on the host.
		if !strings.Contains(said, "SHARED-OK") {
			t.Fatalf("a write to a world-writable readwrite path failed:\n%s", said)
		}
		uid, gid := owner(t, filepath.Join(shared, "mine"))
		switch {
		case h.who.uid != 0 && (uid != uint32(h.who.uid) || gid != uint32(h.who.gid)):
			t.Errorf("rootless, the agent's file is %d:%d on the host, want the caller's %d:%d", uid, gid, h.who.uid, h.who.gid)
		case h.who.uid == 0 && (uid == 0 || gid == 0):
			t.Errorf("as root, the agent's file is %d:%d on the host: the agent is host root\n%s", uid, gid, said)
		case h.who.uid == 0:
			if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
				t.Errorf("as root, the agent is host uid %d, which is the account %q", uid, u.Username)
			}
			t.Logf("as root, the agent is host uid %d, gid %d", uid, gid)
		}
		// cordon says, before the run, that the root-owned readwrite path is not the agent's to write.
		if warned := strings.Contains(said, "filesystem.readwrite: "+rootDir+" is not writable by uid"); warned != (h.who.uid == 0) {
			t.Errorf("warning about the unwritable readwrite path shown: %v, want %v\n%s", warned, h.who.uid == 0, said)
		}
		if strings.Contains(said, "filesystem.readwrite: "+shared+" ") {
			t.Errorf("a warning about a world-writable readwrite path:\n%s", said)
		}
		// What the agent reports of its own mapping agrees: nothing maps to host id 0 as root. (Not in
		// the gVisor tier, whose /proc/self/uid_map is the Sentry's own user namespace, "0 0
		// 4294967295", which says nothing of host ids: the owner of "mine" above is the host's record.)
		for _, line := range strings.Split(said, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[1] == "0" && h.who.uid == 0 && h.tier != "gvisor" {
				t.Errorf("/proc/self/uid_map or gid_map maps to host id 0: %q", line)
			}
		}
		// (Not FD-CHMOD: where cordon relays stdout through a pipe of its own, the agent's fd 1 is
		// that pipe, and the host file's mode above is what counts.)
		for _, bad := range []string{"WROTE", "CHMOD", "PLANTED", "DEVNULL-CHMOD"} {
			if strings.Contains("\n"+said, "\n"+bad+"\n") {
				t.Errorf("the agent reports success for %s:\n%s", bad, said)
			}
		}
	})
}

// TestUIDWorkspaceKeepsOwnership: as root the agent is an unprivileged host id, yet it still edits
// the caller's project files (through the idmapped workspace), the upper layer records its changes
// as the caller's, and apply leaves them owned by the caller, as before; rootless, the same.
func TestUIDWorkspaceKeepsOwnership(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		h.writeFile(filepath.Join(h.ws, "main.go"), "package main\n", 0o644)
		h.writeFile(filepath.Join(h.ws, "old.txt"), "old\n", 0o644)
		r := h.sandboxed("", `echo edited >> main.go && rm old.txt && mkdir -p pkg && echo new > pkg/new.txt && chmod 600 main.go && ls -ln . >&2`)
		if r.code != 0 {
			t.Fatalf("agent run: %s", r)
		}
		id := runID(t, r)
		upper := filepath.Join(h.home, ".local", "state", "cordon", "runs", id, "upper")
		for _, p := range []string{"main.go", "pkg", "pkg/new.txt"} {
			if uid, gid := owner(t, filepath.Join(upper, p)); uid != uint32(h.who.uid) || gid != uint32(h.who.gid) {
				t.Errorf("upper/%s is %d:%d on disk, want the caller's %d:%d", p, uid, gid, h.who.uid, h.who.gid)
			}
		}
		if a := h.cordon(nil, "", "apply", id); a.code != 0 {
			t.Fatalf("apply: %s", a)
		}
		for _, p := range []string{"main.go", "pkg", "pkg/new.txt"} {
			if uid, gid := owner(t, filepath.Join(h.ws, p)); uid != uint32(h.who.uid) || gid != uint32(h.who.gid) {
				t.Errorf("%s after apply is %d:%d, want the caller's %d:%d", p, uid, gid, h.who.uid, h.who.gid)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(h.ws, "main.go")); string(b) != "package main\nedited\n" {
			t.Errorf("main.go after apply: %q", b)
		}
		if fi, err := os.Stat(filepath.Join(h.ws, "main.go")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("mode after apply: %v %v", fi.Mode(), err)
		}
		if _, err := os.Stat(filepath.Join(h.ws, "old.txt")); err == nil {
			t.Error("old.txt survived apply")
		}
	})
}

// TestUIDReadonlyUnderPrivateDir: as root, policy paths under a 0700 directory of root's (as
// /root is) are still shown, since cordon opens them on the host, not init: a read-only file of
// root's, mode 0600, reads as the agent's own, and stays unchangeable.
func TestUIDReadonlyUnderPrivateDir(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		private := filepath.Join(h.base, "private")
		h.writeFile(filepath.Join(private, "tool", "config"), "CONFIG-"+h.canary+"\n", 0o600)
		h.chownAll(private)
		os.Chmod(private, 0o700)
		r := h.sandboxed(fmt.Sprintf("filesystem:\n  readonly: [%q]\n", filepath.Join(private, "tool")),
			fmt.Sprintf(`cat %[1]s/config; chmod 666 %[1]s/config 2>/dev/null && echo CHMOD; echo x >> %[1]s/config 2>/dev/null && echo WROTE; true`, filepath.Join(private, "tool")))
		if r.code != 0 || !strings.Contains(r.stdout, "CONFIG-"+h.canary) {
			t.Fatalf("a readonly path under a 0700 directory is not readable:\n%s", r)
		}
		if fi, err := os.Stat(filepath.Join(private, "tool", "config")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("a readonly file was chmod-ed: %v %v", fi.Mode(), err)
		}
		if b, _ := os.ReadFile(filepath.Join(private, "tool", "config")); string(b) != "CONFIG-"+h.canary+"\n" {
			t.Errorf("a readonly file was written: %q", b)
		}
	})
}

// TestUIDWorkspaceOnUnidmappableFS: as root, a project on a file system that cannot be idmapped
// (ramfs) still runs, through the copied workspace (whose copy, in cordon's state directory, is
// idmapped instead), and the cycle still carries the caller's ownership.
func TestUIDWorkspaceOnUnidmappableFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount ramfs")
	}
	for _, tier := range tiers {
		t.Run(tier, func(t *testing.T) { workspaceOnUnidmappableFS(t, tier) })
	}
}

// workspaceOnUnidmappableFS is TestUIDWorkspaceOnUnidmappableFS in one tier: the gVisor tier's
// runtime creates files in the copy as itself before giving them to the agent.
func workspaceOnUnidmappableFS(t *testing.T, tier string) {
	h := newHarness(t, who{name: "root", uid: 0, gid: 0})
	if tier == "gvisor" {
		h.useGVisor(t)
	}
	if err := syscall.Mount("ramfs", h.ws, "ramfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"); err != nil {
		t.Skipf("mounting ramfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(h.ws, syscall.MNT_DETACH) })
	h.writeFile(filepath.Join(h.ws, "main.go"), "package main\n", 0o644)
	r := h.sandboxed("", `echo edited >> main.go && echo new > new.txt`)
	if r.code != 0 || !strings.Contains(r.stderr, "copy") {
		t.Fatalf("the run on ramfs failed or did not say it copied:\n%s", r)
	}
	id := runID(t, r)
	if a := h.cordon(nil, "", "apply", id); a.code != 0 {
		t.Fatalf("apply: %s", a)
	}
	for _, p := range []string{"main.go", "new.txt"} {
		if uid, gid := owner(t, filepath.Join(h.ws, p)); uid != 0 || gid != 0 {
			t.Errorf("%s after apply is %d:%d, want root's", p, uid, gid)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(h.ws, "main.go")); string(b) != "package main\nedited\n" {
		t.Errorf("main.go after apply: %q", b)
	}
}
