//go:build linux

package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Info describes what this host offers, for `cordon doctor` and for choosing how to limit a run.
type Info struct {
	// Version is the layout: "v2", "v1", "hybrid" (v1 controllers and a cgroup2 mount) or "none".
	Version string
	// Controllers says, for Memory, Pids and CPU, whether the limit is usable: cordon can create a
	// child of its current cgroup in that controller's hierarchy and write the limit file there.
	Controllers map[string]bool
	// Reasons says why a controller is not usable, or what using it involves.
	Reasons map[string]string
	// Kill is how a run is killed as a whole: "cgroup.kill" (atomic, v2, Linux 5.14), "cgroup.freeze"
	// (v2 freeze, then signals), "freezer" (v1 freeze, then signals) or "signal" (signals in rounds).
	Kill string
	// Parents are the directories under which runs' cgroups are created, one per hierarchy.
	Parents []string
}

// Detect finds what the host offers by trying it: it creates a probe cgroup under the caller's current
// cgroup in each hierarchy, writes each controller's limit file with the "no limit" value, and removes
// the probe again. Where a v2 controller can only be enabled after cordon moves itself into a leaf
// cgroup (which New does), Detect does not move, and reports the controller usable with that reason.
func Detect() (Info, error) {
	h, err := readHost()
	if err != nil {
		return Info{Version: "none"}, fmt.Errorf("detecting cgroups: %w", err)
	}
	return detect(h, fmt.Sprintf("cordon-probe-%d-%d", os.Getpid(), time.Now().UnixNano()))
}

func detect(h *host, name string) (Info, error) {
	info := Info{Version: h.version(), Controllers: map[string]bool{}, Reasons: map[string]string{}, Kill: "signal"}
	for _, x := range h.hierarchies {
		if x.v2 || x.has(Memory) || x.has(Pids) || x.has(CPU) || x.has("freezer") {
			info.Parents = append(info.Parents, x.cur)
		}
	}
	g, _, err := create(h, name, Limits{}, options{probe: true})
	if err != nil {
		for _, c := range []string{Memory, Pids, CPU} {
			info.Controllers[c] = false
			info.Reasons[c] = g.why[c]
			if info.Reasons[c] == "" {
				info.Reasons[c] = err.Error()
			}
		}
		info.Kill = "none"
		return info, nil
	}
	alone := false
	if v2 := h.v2(); v2 != nil {
		pids, err := readPids(filepath.Join(v2.cur, "cgroup.procs"))
		alone = err == nil && len(pids) == 1 && pids[0] == h.pid
	}
	for _, c := range []string{Memory, Pids, CPU} {
		why, bad := g.why[c]
		switch {
		case !bad:
			info.Controllers[c] = true
		case alone && slices.Contains(g.busy, c):
			info.Controllers[c] = true
			info.Reasons[c] = "usable: cordon moves itself into the leaf cgroup " + leafName + " to enable it for its runs"
		default:
			info.Controllers[c] = false
			info.Reasons[c] = why
		}
	}
	for _, d := range g.dirs {
		switch {
		case d.V2 && exists(filepath.Join(d.Path, "cgroup.kill")):
			info.Kill = "cgroup.kill"
		case d.V2 && exists(filepath.Join(d.Path, "cgroup.freeze")) && info.Kill == "signal":
			info.Kill = "cgroup.freeze"
		case d.Freezer && info.Kill == "signal":
			info.Kill = "freezer"
		}
	}
	if err := g.Destroy(); err != nil {
		return info, fmt.Errorf("removing the probe cgroup (%s): %w", strings.Join(g.Paths(), ", "), err)
	}
	return info, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
