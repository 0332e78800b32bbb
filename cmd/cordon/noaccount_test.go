//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A caller with no passwd entry (a container's arbitrary uid, or the rootless variants on a host
// without the cordon-test user) runs cordon like anyone else: as its own uid inside, with a home,
// and its edits land in the run's copy. Without $USER, os/user cannot name it either.
func TestCallerWithoutAccountRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not running as root: becoming an id without an account needs root")
	}
	id, err := freeID("/etc/passwd", "/etc/group")
	if err != nil {
		t.Fatal(err)
	}
	for _, withUser := range []bool{true, false} {
		t.Run("USER="+strconv.FormatBool(withUser), func(t *testing.T) {
			h := newHarness(t, who{name: "rootless", uid: id, gid: id})
			if !withUser {
				var env []string
				for _, kv := range h.env {
					if !strings.HasPrefix(kv, "USER=") {
						env = append(env, kv)
					}
				}
				h.env = env
			}
			h.writeFile(filepath.Join(h.ws, "notes.txt"), "before\n", 0o644)
			r := h.sandboxed("", `id -u; test -d "$HOME" && echo home-ok; echo after >> notes.txt`)
			if r.code != 0 {
				t.Fatalf("cordon run as uid %d without an account: %v", id, r)
			}
			if !strings.Contains(r.stdout, strconv.Itoa(id)+"\n") || !strings.Contains(r.stdout, "home-ok") {
				t.Errorf("want uid %d and a home inside: %v", id, r)
			}
			if d := h.cordon(nil, "", "diff", "last"); d.code != 0 || !strings.Contains(d.stdout, "+after") {
				t.Errorf("diff of the run: %v", d)
			}
		})
	}
}

func TestFreeIDSkipsEveryAccountAndGroup(t *testing.T) {
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	group := filepath.Join(dir, "group")
	os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\na:x:60000:60000::/:/bin/sh\n"), 0o644)
	os.WriteFile(group, []byte("g:x:60001:\nbroken line\n"), 0o644)
	for _, tc := range []struct {
		files []string
		want  int
	}{
		{[]string{passwd, group}, 60002},
		{[]string{passwd}, 60001},
		{[]string{filepath.Join(dir, "missing")}, 60000},
	} {
		if got, err := freeID(tc.files...); err != nil || got != tc.want {
			t.Errorf("freeID(%v) = %d, %v; want %d", tc.files, got, err, tc.want)
		}
	}
}

// Every identity is either run or named with a reason, whoever runs the tests: as root both run
// (rootless as cordon-test or an id without an account), otherwise the root variants are skipped
// with a reason rather than left out.
func TestCallersNameEveryIdentity(t *testing.T) {
	for _, euid := range []int{0, 1000} {
		ids, skipped := callers(euid)
		names := map[string]bool{}
		for _, w := range ids {
			names[w.name] = true
			if euid == 0 && w.name == "rootless" && (w.uid == 0 || w.gid == 0) {
				t.Errorf("euid %d: the rootless variant runs as uid %d gid %d", euid, w.uid, w.gid)
			}
		}
		for name, reason := range skipped {
			if names[name] || reason == "" {
				t.Errorf("euid %d: %q both run and skipped, or skipped without a reason (%q)", euid, name, reason)
			}
			names[name] = true
		}
		if !names["root"] || !names["rootless"] {
			t.Errorf("euid %d: identities %v, skipped %v: each of root and rootless must be run or skipped", euid, ids, skipped)
		}
	}
	if _, skipped := callers(1000); skipped["root"] == "" {
		t.Errorf("as an ordinary user the root variants are not reported as skipped")
	}
}
