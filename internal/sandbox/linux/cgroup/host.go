//go:build linux

package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"github.com/cordon-sandbox/cordon/internal/mountinfo"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// hierarchy is one mounted cgroup hierarchy as this process sees it: where it is mounted and which
// directory in it is the caller's current cgroup, under which the run's cgroup is made.
type hierarchy struct {
	// v2 is true for the unified (cgroup2) hierarchy.
	v2 bool
	// controllers are a v1 hierarchy's controllers (several when co-mounted, e.g. cpu and cpuacct).
	// For v2 they are read from cgroup.controllers when needed, because they differ per cgroup.
	controllers []string
	// mount is the mount point.
	mount string
	// cur is the absolute directory of the caller's current cgroup.
	cur string
}

// has reports whether a v1 hierarchy carries controller c.
func (h hierarchy) has(c string) bool { return slices.Contains(h.controllers, c) }

// host is what New and Detect need to know about the machine, gathered once per call so that the logic
// can be tested against fake trees and fixtures instead of the real /proc and /sys.
type host struct {
	hierarchies []hierarchy
	// swap says whether the host has swap configured, so that a memory limit that does not also cap
	// swap is reported as unenforced rather than silently leaky.
	swap bool
	// pid is the caller's pid, used to decide whether it may move itself into a leaf cgroup (v2).
	pid int
}

// v2 returns the unified hierarchy, or nil when there is none.
func (h *host) v2() *hierarchy {
	for i := range h.hierarchies {
		if h.hierarchies[i].v2 {
			return &h.hierarchies[i]
		}
	}
	return nil
}

// v1 returns the v1 hierarchy carrying controller c, or nil.
func (h *host) v1(c string) *hierarchy {
	for i := range h.hierarchies {
		if !h.hierarchies[i].v2 && h.hierarchies[i].has(c) {
			return &h.hierarchies[i]
		}
	}
	return nil
}

// version names the layout: "v2", "v1" or "hybrid". Named-only v1 hierarchies (name=systemd) do not
// make a host hybrid: they carry no controller.
func (h *host) version() string {
	var v1, v2 bool
	for _, x := range h.hierarchies {
		if x.v2 {
			v2 = true
		} else if len(x.controllers) > 0 {
			v1 = true
		}
	}
	switch {
	case v1 && v2:
		return "hybrid"
	case v1:
		return "v1"
	case v2:
		return "v2"
	}
	return "none"
}

// readHost inspects the running system.
func readHost() (*host, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("reading this process's cgroups: %w", err)
	}
	hs, err := parseHierarchies(mi, pc)
	if err != nil {
		return nil, err
	}
	swap := true // when unknown, assume the worst: a limit without swap accounting would leak
	if mem, err := os.ReadFile("/proc/meminfo"); err == nil {
		if total, ok := meminfoKB(mem, "SwapTotal"); ok {
			swap = total > 0
		}
	}
	return &host{hierarchies: hs, swap: swap, pid: os.Getpid()}, nil
}

// meminfoKB returns the value of one /proc/meminfo field.
func meminfoKB(mem []byte, key string) (int64, bool) {
	for line := range bytes.Lines(mem) {
		k, v, ok := strings.Cut(string(line), ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		return n, err == nil
	}
	return 0, false
}

// mount is one cgroup or cgroup2 line of /proc/self/mountinfo.
type mount struct {
	v2    bool
	root  string   // the directory of the hierarchy that is mounted (not "/" for bind mounts)
	point string   // where it is mounted
	opts  []string // super options: for v1 they name the controllers
}

// parseHierarchies matches the cgroup mounts of mountInfo with the lines of /proc/self/cgroup
// ("id:controllers:path") to find, for every hierarchy this process is in, the directory of its current
// cgroup. Hierarchies that are not mounted, or whose current cgroup is outside what is mounted (a bind
// mount of a subtree we are not in), are left out: nothing can be created there.
func parseHierarchies(mountInfo, procCgroup []byte) ([]hierarchy, error) {
	var mounts []mount
	for line := range bytes.Lines(mountInfo) {
		f := strings.Fields(string(line))
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		mounts = append(mounts, mount{
			v2:    fstype == "cgroup2",
			root:  mountinfo.Unescape(f[3]),
			point: mountinfo.Unescape(f[4]),
			opts:  strings.Split(f[sep+3], ","),
		})
	}
	var hs []hierarchy
	for line := range bytes.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSuffix(string(line), "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		id, list, path := parts[0], parts[1], parts[2]
		v2 := id == "0" && list == ""
		var want []string
		if !v2 {
			want = strings.Split(list, ",")
		}
		for _, m := range mounts {
			if m.v2 != v2 || (!v2 && !containsAll(m.opts, want)) {
				continue
			}
			rel, ok := relativeTo(path, m.root)
			if !ok {
				continue
			}
			h := hierarchy{v2: v2, mount: m.point, cur: filepath.Join(m.point, rel)}
			for _, c := range want {
				if !strings.HasPrefix(c, "name=") {
					h.controllers = append(h.controllers, c)
				}
			}
			hs = append(hs, h)
			break
		}
	}
	if len(hs) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy is mounted where this process's cgroups are")
	}
	return hs, nil
}

// relativeTo returns path relative to a mount's root, or false when path is not inside it.
func relativeTo(path, root string) (string, bool) {
	if !strings.HasPrefix(path, "/") || strings.Contains(path, "/..") {
		return "", false // outside our cgroup namespace's view: "/../x"
	}
	switch {
	case root == "/":
		return path, true
	case path == root:
		return "/", true
	case strings.HasPrefix(path, root+"/"):
		return path[len(root):], true
	}
	return "", false
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return len(want) > 0
}

// readString reads a small cgroup file as trimmed text.
func readString(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// fileFields reads a flat-keyed cgroup file ("key value" lines, as cgroup.events or memory.events).
func fileFields(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, sc.Err()
}
