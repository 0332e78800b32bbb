//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// Group is the set of cgroups (one per hierarchy used) that hold one sandbox run. It is safe for
// concurrent use: Kill may race with Destroy (a signal handler and the normal exit path).
type Group struct {
	mu        sync.Mutex
	dirs      []dir
	why       map[string]string
	destroyed bool
	// busy lists controllers v2 refused to enable because the caller's cgroup holds processes; Detect
	// uses it to tell "usable once cordon moves itself into a leaf" from "not usable".
	busy []string
}

// dir is one cgroup directory of a Group. It is also the reaper's instruction format, so it is
// serialised; keep it plain data.
type dir struct {
	// Path is the absolute directory of the cgroup.
	Path string `json:"path"`
	// V2 marks the unified hierarchy (cgroup.kill, cgroup.events, cgroup.freeze).
	V2 bool `json:"v2,omitempty"`
	// Freezer marks a v1 hierarchy carrying the freezer controller, used to stop a tree before
	// signalling it so that nothing forks in between.
	Freezer bool `json:"freezer,omitempty"`
	// Controllers are the controllers whose files this directory offers (v1: the hierarchy's; v2: the
	// ones enabled for it). Stats reads them.
	Controllers []string `json:"controllers,omitempty"`
}

// options are what differs between New and Detect's probe.
type options struct {
	// probe writes "no limit" values for every controller of every hierarchy, to see what is usable.
	probe bool
	// selfMove allows moving this process into a leaf cgroup on v2 when that is the only way to enable
	// controllers for children (the "no internal processes" rule).
	selfMove bool
}

// New creates the run's cgroups named name (for example "cordon-<run id>") under the caller's current
// cgroup in every hierarchy needed for l, writes the limits and returns the group. Limits it cannot
// enforce are returned by name (Memory, Pids, CPU) in unenforced, with the reason given by Why; the
// caller warns once and falls back to rlimits. When the host has a cgroup2 hierarchy the group always has
// a directory there, even without controllers, because cgroup.kill is the race-free way to kill a tree.
//
// On v2, a controller can only be enabled for children of a cgroup that holds no process; when cordon is
// the only process of its cgroup (for example under `systemd-run --user --scope -p Delegate=yes`), New
// moves it into a leaf child "cordon-supervisor" to make that possible. The leaf stays, empty, after
// cordon exits; the delegating scope removes it with itself.
//
// An error means nothing was created: no cgroup at all could be made, or the arguments are invalid.
func New(name string, l Limits) (g *Group, unenforced []string, err error) {
	if err := validName(name); err != nil {
		return nil, nil, err
	}
	if err := l.validate(); err != nil {
		return nil, nil, err
	}
	h, err := readHost()
	if err != nil {
		return nil, nil, fmt.Errorf("creating cgroup %s: %w: %w", name, err, sandbox.ErrHostLacks)
	}
	g, unenforced, err = create(h, name, l, options{selfMove: true})
	if err != nil {
		return nil, nil, err
	}
	return g, unenforced, nil
}

// validName refuses names that are not one plain path element: the name becomes a directory under
// the caller's cgroup and must not reach anywhere else.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 200 {
		return fmt.Errorf("cgroup name %q: not a usable directory name", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("cgroup name %q: only letters, digits, '-', '_' and '.' are allowed", name)
		}
	}
	if strings.HasPrefix(name, "cgroup.") {
		return fmt.Errorf("cgroup name %q: the cgroup. prefix is reserved by the kernel", name)
	}
	return nil
}

// create does New's work against h. On error the returned group has no directories, only the reasons
// (Detect reports them).
func create(h *host, name string, l Limits, o options) (*Group, []string, error) {
	g := &Group{why: map[string]string{}}
	wanted := l.wanted()
	if o.probe {
		wanted = []string{Memory, Pids, CPU}
	}
	// Pick a hierarchy for every controller: v2 where it offers the controller, else its v1 mount.
	v2 := h.v2()
	var v2avail []string
	if v2 != nil {
		if s, err := readString(filepath.Join(v2.cur, "cgroup.controllers")); err == nil {
			v2avail = strings.Fields(s)
		}
	}
	var onV2 []string
	onV1 := map[*hierarchy][]string{}
	for _, c := range wanted {
		switch {
		case v2 != nil && slices.Contains(v2avail, c):
			onV2 = append(onV2, c)
		case h.v1(c) != nil:
			onV1[h.v1(c)] = append(onV1[h.v1(c)], c)
		default:
			g.why[c] = "the " + c + " controller is not available to this process's cgroup"
		}
	}

	// The v2 directory, for its controllers and for cgroup.kill.
	if v2 != nil {
		enabled := enableV2(h, v2.cur, onV2, o.selfMove, g)
		d := dir{Path: filepath.Join(v2.cur, name), V2: true, Controllers: enabled}
		if err := os.Mkdir(d.Path, 0o755); errors.Is(err, fs.ErrExist) {
			return g, nil, fmt.Errorf("creating cgroup %s: %w (run names must be unique)", name, err)
		} else if err != nil {
			for _, c := range onV2 {
				g.why[c] = err.Error() // a *PathError: "mkdir <path>: <reason>"
			}
		} else {
			g.dirs = append(g.dirs, d)
		}
	}
	// The v1 directories. Without a v2 directory, the freezer is wanted too, to kill reliably.
	hasV2 := len(g.dirs) > 0
	for i := range h.hierarchies {
		hi := &h.hierarchies[i]
		cs := onV1[hi]
		freezer := !hi.v2 && hi.has("freezer") && !hasV2
		if len(cs) == 0 && !freezer {
			continue
		}
		d := dir{Path: filepath.Join(hi.cur, name), Freezer: hi.has("freezer"), Controllers: hi.controllers}
		err := os.Mkdir(d.Path, 0o755)
		if errors.Is(err, fs.ErrExist) {
			// Someone else's cgroup of that name: never adopt it. Undo what was made.
			for _, made := range g.dirs {
				_ = unix.Rmdir(made.Path)
			}
			g.dirs = nil
			return g, nil, fmt.Errorf("creating cgroup %s: %w (run names must be unique)", name, err)
		}
		if err != nil {
			for _, c := range cs {
				g.why[c] = err.Error()
			}
			continue
		}
		g.dirs = append(g.dirs, d)
	}
	if len(g.dirs) == 0 {
		return g, nil, fmt.Errorf("creating cgroup %s: no hierarchy lets this process create a child (%s): %w",
			name, whyText(g.why), sandbox.ErrHostLacks)
	}

	// The limits: a controller whose limit cannot be written is unenforced; its directory stays, as a
	// harmless member of the group that Destroy removes.
	for _, c := range wanted {
		if _, bad := g.why[c]; bad {
			continue
		}
		d := g.dirFor(c)
		if d == nil {
			g.why[c] = "no cgroup directory offers the " + c + " controller"
			continue
		}
		leak, err := applyWrites(d.Path, limitWrites(d.V2, c, l, h.swap, o.probe))
		switch {
		case err != nil:
			g.why[c] = fmt.Sprintf("setting the %s limit: %v", c, err)
		case leak != "":
			g.why[c] = leak
		}
	}
	var unenforced []string
	for _, c := range wanted {
		if _, bad := g.why[c]; bad {
			unenforced = append(unenforced, c)
		}
	}
	return g, unenforced, nil
}

// dirFor returns the directory that carries controller c's files.
func (g *Group) dirFor(c string) *dir {
	for i := range g.dirs {
		if slices.Contains(g.dirs[i].Controllers, c) {
			return &g.dirs[i]
		}
	}
	return nil
}

// enableV2 makes sure controllers cs are enabled for the children of cur (cgroup.subtree_control) and
// returns the ones that are. A failure is recorded in why. When the kernel refuses because cur holds
// processes (EBUSY, the "no internal processes" rule) and selfMove is set and this process is cur's only
// member, the process moves into the leaf cur/cordon-supervisor, after which enabling is allowed.
func enableV2(h *host, cur string, cs []string, selfMove bool, g *Group) []string {
	why := g.why
	if len(cs) == 0 {
		return nil
	}
	ctl := filepath.Join(cur, "cgroup.subtree_control")
	s, err := readString(ctl)
	if err != nil {
		for _, c := range cs {
			why[c] = fmt.Sprintf("reading %s: %v", ctl, err)
		}
		return nil
	}
	have := strings.Fields(s)
	var enabled []string
	moved := false
	for _, c := range cs {
		if slices.Contains(have, c) {
			enabled = append(enabled, c)
			continue
		}
		err := writeFile(ctl, "+"+c)
		if errors.Is(err, syscall.EBUSY) && !moved {
			// The "no internal processes" rule: cur holds processes, so its children get no controllers.
			merr := errors.New("moving into a leaf was not allowed")
			if selfMove {
				if merr = moveSelfToLeaf(h, cur); merr == nil {
					moved = true
					err = writeFile(ctl, "+"+c)
				}
			}
			if err != nil {
				g.busy = append(g.busy, c)
				why[c] = fmt.Sprintf("cannot enable %s for children of %s, which holds processes (%v); "+
					"run cordon in a cgroup of its own, e.g. under `systemd-run [--user] --scope -p Delegate=yes`", c, cur, merr)
				continue
			}
		}
		if err != nil {
			why[c] = fmt.Sprintf("enabling %s: %v", c, err)
			continue
		}
		enabled = append(enabled, c)
	}
	return enabled
}

// leafName is the leaf cgroup cordon moves itself into on v2 (see enableV2).
const leafName = "cordon-supervisor"

// moveSelfToLeaf moves this process into cur/cordon-supervisor, but only when it is alone in cur: moving
// other processes would change accounting the user did not ask to change.
func moveSelfToLeaf(h *host, cur string) error {
	pids, err := readPids(filepath.Join(cur, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("listing the processes of %s: %w", cur, err)
	}
	if len(pids) != 1 || pids[0] != h.pid {
		return fmt.Errorf("cordon is not alone there: %d processes", len(pids))
	}
	leaf := filepath.Join(cur, leafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating %s: %w", leaf, err)
	}
	if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(h.pid)); err != nil {
		_ = os.Remove(leaf)
		return fmt.Errorf("moving cordon into %s: %w", leaf, err)
	}
	return nil
}

// whyText renders reasons in a stable order for an error message.
func whyText(why map[string]string) string {
	if len(why) == 0 {
		return "no cgroup hierarchy found"
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(why)) {
		parts = append(parts, c+": "+why[c])
	}
	return strings.Join(parts, "; ")
}

// Why says why limit (Memory, Pids or CPU) is not enforced, or "" when it is or was not asked for.
// The caller puts it in its one warning line.
func (g *Group) Why(limit string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.why[limit]
}

// Paths returns the group's cgroup directories, one per hierarchy used.
func (g *Group) Paths() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ps []string
	for _, d := range g.dirs {
		ps = append(ps, d.Path)
	}
	return ps
}

// Add moves process pid (the sandbox's init, before it starts the command) into the group in every
// hierarchy; its descendants are born inside. It fails closed: on error the process may be in some of
// the group's cgroups but not all, and the caller must kill it rather than run it.
func (g *Group) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("adding pid %d to the run's cgroup: not a process id", pid)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed {
		return errors.New("adding a process to the run's cgroup: the group was destroyed")
	}
	for _, d := range g.dirs {
		if err := writeFile(filepath.Join(d.Path, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("adding pid %d to cgroup %s: %w", pid, d.Path, err)
		}
	}
	return nil
}

// Stats are the group's resource use, for the end-of-run report. A field is -1 when this host's cgroup
// files do not offer it.
type Stats struct {
	MemoryCurrent int64 // bytes in use now
	MemoryPeak    int64 // highest use seen, in bytes
	PidsCurrent   int64 // processes and threads now
	PidsPeak      int64 // most processes and threads at once
	OOMKills      int64 // processes the OOM killer killed in the group
}

// Stats reads the group's resource use from whatever files its controllers offer.
func (g *Group) Stats() (Stats, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := Stats{-1, -1, -1, -1, -1}
	if g.destroyed {
		return st, errors.New("reading cgroup stats: the group was destroyed")
	}
	num := func(d *dir, file string) int64 {
		s, err := readString(filepath.Join(d.Path, file))
		if err != nil {
			return -1
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	field := func(d *dir, file, key string) int64 {
		kv, err := fileFields(filepath.Join(d.Path, file))
		if err != nil {
			return -1
		}
		n, err := strconv.ParseInt(kv[key], 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	if d := g.dirFor(Memory); d != nil {
		if d.V2 {
			st.MemoryCurrent, st.MemoryPeak = num(d, "memory.current"), num(d, "memory.peak")
			st.OOMKills = field(d, "memory.events", "oom_kill")
		} else {
			st.MemoryCurrent, st.MemoryPeak = num(d, "memory.usage_in_bytes"), num(d, "memory.max_usage_in_bytes")
			st.OOMKills = field(d, "memory.oom_control", "oom_kill")
		}
	}
	if d := g.dirFor(Pids); d != nil {
		st.PidsCurrent, st.PidsPeak = num(d, "pids.current"), num(d, "pids.peak")
	}
	return st, nil
}

// readPids reads a cgroup.procs file.
func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %q is not a pid", path, f)
		}
		pids = append(pids, p)
	}
	return pids, nil
}
