//go:build linux

package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

func TestParseSubordinate(t *testing.T) {
	for _, tc := range []struct {
		name, data  string
		base, count int
		found, fail bool
	}{
		{name: "empty"},
		{name: "other users only", data: "alice:100000:65536\nbob:165536:65536\n"},
		{name: "entry", data: "alice:100000:65536\ncordon:300000:65536\n", base: 300000, count: 65536, found: true},
		{name: "first entry wins", data: "cordon:300000:2000\ncordon:400000:65536\n", base: 300000, count: 2000, found: true},
		{name: "spaces around", data: "  cordon:300000:65536  \n", base: 300000, count: 65536, found: true},
		{name: "prefix of the name is not it", data: "cordon2:300000:65536\n"},
		{name: "zero base maps to root", data: "cordon:0:65536\n", fail: true},
		{name: "zero count", data: "cordon:300000:0\n", fail: true},
		{name: "past the last id", data: "cordon:4294967000:65536\n", fail: true},
		{name: "not a number", data: "cordon:lots:65536\n", fail: true},
		{name: "negative", data: "cordon:-5:65536\n", fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, count, found, err := parseSubordinate([]byte(tc.data), "cordon")
			if (err != nil) != tc.fail {
				t.Fatalf("err = %v, want failure %v", err, tc.fail)
			}
			if base != tc.base || count != tc.count || found != tc.found {
				t.Fatalf("got %d:%d found=%v, want %d:%d found=%v", base, count, found, tc.base, tc.count, tc.found)
			}
		})
	}
}

func TestRootHostIDs(t *testing.T) {
	u := sandbox.User{UID: 1000, GID: 1000, Name: "cordon", Home: "/home/cordon"}
	for _, tc := range []struct {
		name                                    string
		subuid, subgid, passwd, group, nsswitch string
		uid, gid                                int
		wantErr                                 string
		unreadablePasswd                        bool
	}{
		{name: "default range", passwd: "root:x:0:0::/root:/bin/sh\n", uid: DefaultIDBase + 1000, gid: DefaultIDBase + 1000},
		{name: "reserved range", subuid: "cordon:300000:65536\n", subgid: "cordon:500000:65536\n", uid: 301000, gid: 501000},
		{name: "range too small", subuid: "cordon:300000:1000\n", wantErr: "does not fit"},
		{name: "uid of an account", subuid: "cordon:0:65536\n", wantErr: "malformed"},
		{name: "collides with a user", subuid: "cordon:1000:65536\n", passwd: "dev:x:2000:2000::/home/dev:/bin/sh\n", wantErr: `belongs to "dev"`},
		{name: "collides with a group", subgid: "cordon:1000:65536\n", group: "devs:x:2000:\n", wantErr: `belongs to "devs"`},
		{name: "in another user's subordinate uids", subuid: "alice:100000:65536\ncordon:100000:65536\n", wantErr: `subordinate range of "alice"`},
		{name: "in another group's subordinate gids", subgid: "bob:2000001000:10\n", wantErr: `subordinate range of "bob"`},
		{name: "a subordinate range beside it", subuid: "alice:100000:65536\ncordon:165536:65536\n", subgid: "alice:100000:65536\ncordon:165536:65536\n", uid: 166536, gid: 166536},
		{name: "passwd unreadable", unreadablePasswd: true, wantErr: "belongs to no one"},
		// getent answers from the machine's own databases: uid 65534 is Debian's "nobody", in no
		// file of the test's, found only by asking the name service.
		{name: "accounts from a directory service", subuid: "cordon:64534:65536\n", subgid: "cordon:64534:65536\n", nsswitch: "passwd: files ldap\ngroup: files\n", wantErr: `belongs to "nobody"`},
		{name: "local files only", nsswitch: "passwd: files systemd\ngroup: compat [NOTFOUND=return] files\n", uid: DefaultIDBase + 1000, gid: DefaultIDBase + 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, content string) string {
				p := filepath.Join(dir, name)
				if content != "" {
					if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return p
			}
			files := idFiles{SubUID: write("subuid", tc.subuid), SubGID: write("subgid", tc.subgid), Passwd: write("passwd", tc.passwd), Group: write("group", tc.group), NSSwitch: write("nsswitch.conf", tc.nsswitch)}
			if tc.unreadablePasswd {
				// A directory in its place: reading fails for root too.
				if err := os.Mkdir(files.Passwd, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			ids, err := rootHostIDs(u, files)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ids.UID != tc.uid || ids.GID != tc.gid {
				t.Fatalf("got %d:%d, want %d:%d", ids.UID, ids.GID, tc.uid, tc.gid)
			}
		})
	}
}

// FuzzParseSubordinate: whatever the file holds, a range found never includes host id 0 and never
// runs past the last id.
func FuzzParseSubordinate(f *testing.F) {
	for _, s := range []string{"cordon:100000:65536\n", "cordon:0:1\n", "x:1:1\ncordon:4294901760:65535\n", "cordon::\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		base, count, found, err := parseSubordinate(data, "cordon")
		if err != nil || !found {
			return
		}
		if base <= 0 || count <= 0 || uint64(base)+uint64(count) > 1<<32-1 {
			t.Fatalf("range %d:%d accepted", base, count)
		}
	})
}

// TestRootMapsToReservedIDs attacks from inside a real sandbox started as root: nothing inside maps
// to host uid 0, a root-owned file of a writable policy path is neither written nor chmod-ed, a
// root-owned directory takes no new file (not even through root's supplementary groups), a new
// file lands as the reserved uid, and the overlay's upper layer records the agent's files as root's.
func TestRootMapsToReservedIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ids, err := rootHostIDs(sandbox.User{UID: 1000, GID: 1000}, hostIDFiles())
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	lower, runDir, ws := filepath.Join(base, "project"), filepath.Join(base, "run"), filepath.Join(base, "ws")
	rootDir, shared := filepath.Join(base, "rootdir"), filepath.Join(base, "shared")
	for _, d := range []string{lower, filepath.Join(runDir, "upper"), filepath.Join(runDir, "work"), rootDir, shared} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(rootDir, 0o775) // group root may write: root's supplementary groups must not follow
	os.Chmod(shared, 0o1777)
	os.WriteFile(filepath.Join(lower, "old.txt"), []byte("old\n"), 0o644)
	os.WriteFile(filepath.Join(rootDir, "root.txt"), []byte("root\n"), 0o644)
	spec := testSpecIn(ws, "sh", "-c", fmt.Sprintf(`cat /proc/self/uid_map /proc/self/gid_map
echo more >> old.txt && echo new > new.txt && echo WS-OK
echo x >> %[1]s/root.txt 2>/dev/null && echo WROTE
chmod 666 %[1]s/root.txt 2>/dev/null && echo CHMOD
touch %[1]s/planted 2>/dev/null && echo PLANTED
echo y > %[2]s/mine && echo SHARED-OK`, rootDir, shared))
	spec.Workspace = sandbox.Workspace{Path: ws, Source: lower, Overlay: &sandbox.Overlay{Upper: filepath.Join(runDir, "upper"), Work: filepath.Join(runDir, "work")}}
	spec.Mounts = []sandbox.Mount{{Source: rootDir, Writable: true}, {Source: shared, Writable: true}}
	out, st, err := startSpec(t, spec)
	if err != nil || st.Code != 0 {
		t.Fatalf("exit %v %v:\n%s", st, err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[1] == "0" {
			t.Errorf("inside maps to host id 0: %q", line)
		}
	}
	for _, bad := range []string{"WROTE", "CHMOD", "PLANTED"} {
		if strings.Contains(out, bad) {
			t.Errorf("the agent acted on a root-owned host file (%s):\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "WS-OK") || !strings.Contains(out, "SHARED-OK") {
		t.Fatalf("allowed writes failed:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(rootDir, "root.txt")); string(b) != "root\n" {
		t.Errorf("root-owned file changed: %q", b)
	}
	if fi, err := os.Stat(filepath.Join(rootDir, "root.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("root-owned file's mode changed: %v %v", fi.Mode(), err)
	}
	if _, err := os.Lstat(filepath.Join(rootDir, "planted")); err == nil {
		t.Error("a file was planted in a root-owned directory")
	}
	owner := func(p string) (uint32, uint32) {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return st.Uid, st.Gid
	}
	if u, g := owner(filepath.Join(shared, "mine")); u != uint32(ids.UID) || g != uint32(ids.GID) {
		t.Errorf("a file the agent made in a writable path is %d:%d on the host, want the reserved %d:%d", u, g, ids.UID, ids.GID)
	}
	for _, f := range []string{"old.txt", "new.txt"} {
		if u, g := owner(filepath.Join(runDir, "upper", f)); u != 0 || g != 0 {
			t.Errorf("upper/%s is %d:%d on disk, want the caller's 0:0", f, u, g)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(lower, "old.txt")); string(b) != "old\n" {
		t.Errorf("the lower layer changed: %q", b)
	}
}

// TestRootRefusesPathSwappedForLink attacks the window between the run's check of a policy path and
// cordon opening it with root's rights: the path was resolved and checked as a plain directory, and a
// component has become a symbolic link to a directory of root's secrets by the time the box starts.
// The box must refuse to start rather than show the secrets; the control starts the same spec with
// the path as checked and reads the file that was meant to be shown.
func TestRootRefusesPathSwappedForLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only cordon running as root opens policy paths with root's rights")
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	ws, shared, secrets := filepath.Join(base, "ws"), filepath.Join(base, "shared"), filepath.Join(base, "secrets")
	for _, d := range []string{ws, filepath.Join(shared, "data"), secrets} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(secrets, 0o700)
	os.WriteFile(filepath.Join(shared, "data", "meant.txt"), []byte("MEANT\n"), 0o644)
	os.WriteFile(filepath.Join(secrets, "meant.txt"), []byte("ROOT-SECRET\n"), 0o600)
	checked := filepath.Join(shared, "data")
	run := func() (string, error) {
		spec := testSpecIn(ws, "cat", filepath.Join(checked, "meant.txt"))
		spec.Mounts = []sandbox.Mount{{Source: checked}}
		out, st, err := startSpec(t, spec)
		if err == nil && st.Code != 0 {
			t.Logf("exit %d: %s", st.Code, out)
		}
		return out, err
	}
	if out, err := run(); err != nil || !strings.Contains(out, "MEANT") {
		t.Fatalf("control: the checked path is not shown: %q %v", out, err)
	}
	// The swap: shared/data is now a link to the secrets, as a process with write access to shared
	// (another run's agent, through a readwrite path) could make it.
	if err := os.Rename(checked, filepath.Join(shared, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secrets, checked); err != nil {
		t.Fatal(err)
	}
	out, err := run()
	if strings.Contains(out, "ROOT-SECRET") {
		t.Fatalf("the box showed root's secrets through a link swapped in after the check: %q", out)
	}
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("the box started over a swapped path (err %v, output %q); it must refuse", err, out)
	}
}
