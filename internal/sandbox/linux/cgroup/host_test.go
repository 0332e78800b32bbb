//go:build linux

package cgroup

import (
	"reflect"
	"testing"
)

// Mount tables and /proc/self/cgroup of the layouts cordon meets, to check that the run's cgroups go
// under the caller's current cgroup and never at a hierarchy root the caller is not in.
func TestParseHierarchies(t *testing.T) {
	type want struct {
		v2   bool
		ctrl []string
		cur  string
	}
	tests := []struct {
		name, mountinfo, cgroup, version string
		want                             []want
	}{{
		name: "hybrid, nested memory cgroup (this CI host)",
		mountinfo: `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`,
		cgroup: `9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/148f
1:cpu:/
0::/
`,
		version: "hybrid",
		want: []want{
			{ctrl: nil, cur: "/sys/fs/cgroup/systemd"},
			{ctrl: []string{"pids"}, cur: "/sys/fs/cgroup/pids"},
			{ctrl: []string{"freezer"}, cur: "/sys/fs/cgroup/freezer"},
			{ctrl: []string{"memory"}, cur: "/sys/fs/cgroup/memory/process_api/148f"},
			{ctrl: []string{"cpu"}, cur: "/sys/fs/cgroup/cpu"},
			{v2: true, cur: "/sys/fs/cgroup/unified"},
		},
	}, {
		name:      "pure v2 under systemd, user scope",
		mountinfo: "25 22 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
		cgroup:    "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope\n",
		version:   "v2",
		want:      []want{{v2: true, cur: "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope"}},
	}, {
		name: "v1 with co-mounted cpu,cpuacct and a space in the mount point",
		mountinfo: `31 30 0:28 / /cg/cpu\040acct rw - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /cg/memory rw - cgroup cgroup rw,memory
`,
		cgroup:  "3:cpu,cpuacct:/a\n2:memory:/a\n0::/a\n",
		version: "v1",
		want: []want{
			{ctrl: []string{"cpu", "cpuacct"}, cur: "/cg/cpu acct/a"},
			{ctrl: []string{"memory"}, cur: "/cg/memory/a"},
		},
	}, {
		name: "container: subtree bind-mounted, and a hierarchy whose mount does not contain us",
		mountinfo: `40 30 0:37 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw
41 30 0:38 /other /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
`,
		cgroup:  "5:pids:/docker/abc\n0::/docker/abc/sub\n",
		version: "v2",
		want:    []want{{v2: true, cur: "/sys/fs/cgroup/sub"}},
	}, {
		name:      "cgroup namespace: we are outside its root",
		mountinfo: "40 30 0:37 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		cgroup:    "0::/../../elsewhere\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, err := parseHierarchies([]byte(tt.mountinfo), []byte(tt.cgroup))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("want an error, got %+v", hs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for _, h := range hs {
				got = append(got, want{v2: h.v2, ctrl: h.controllers, cur: h.cur})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("hierarchies:\n got %+v\nwant %+v", got, tt.want)
			}
			if v := (&host{hierarchies: hs}).version(); v != tt.version {
				t.Errorf("version = %q, want %q", v, tt.version)
			}
		})
	}
}

func TestRelativeToRefusesEscapes(t *testing.T) {
	for _, p := range []string{"/../x", "/a/../../b", "relative", "/dockerx/abc"} {
		if rel, ok := relativeTo(p, "/docker"); ok {
			t.Errorf("relativeTo(%q, /docker) = %q, want refusal", p, rel)
		}
	}
}

func TestMeminfo(t *testing.T) {
	mem := []byte("MemTotal:       24683264 kB\nSwapTotal:       1048572 kB\nSwapFree: 0 kB\n")
	if n, ok := meminfoKB(mem, "SwapTotal"); !ok || n != 1048572 {
		t.Errorf("SwapTotal = %d, %v", n, ok)
	}
	if _, ok := meminfoKB(mem, "Nope"); ok {
		t.Error("found a missing key")
	}
}
