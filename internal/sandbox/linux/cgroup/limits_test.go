//go:build linux

package cgroup

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDir makes a directory holding the given control files, each with "max" in it, as a stand-in for a
// cgroup directory of a controller layout this host does not have.
func fakeDir(t *testing.T, files ...string) string {
	t.Helper()
	d := t.TempDir()
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(d, f), []byte("max\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func readFake(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestV2LimitFiles(t *testing.T) {
	d := fakeDir(t, "memory.max", "memory.swap.max", "memory.oom.group", "pids.max", "cpu.max")
	l := Limits{MemoryBytes: 64 << 20, Pids: 50, CPU: 1.5}
	for _, c := range []string{Memory, Pids, CPU} {
		leak, err := applyWrites(d, limitWrites(true, c, l, true, false))
		if err != nil || leak != "" {
			t.Fatalf("%s: leak %q, err %v", c, leak, err)
		}
	}
	for file, want := range map[string]string{
		"memory.max":       "67108864",
		"memory.swap.max":  "0", // swap must not extend the limit
		"memory.oom.group": "1", // the OOM killer takes the whole run
		"pids.max":         "50",
		"cpu.max":          "150000 100000",
	} {
		if got := readFake(t, d, file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
}

func TestV1LimitFiles(t *testing.T) {
	d := fakeDir(t, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "pids.max", "cpu.cfs_quota_us", "cpu.cfs_period_us")
	l := Limits{MemoryBytes: 1 << 30, Pids: 7, CPU: 0.25}
	for _, c := range []string{Memory, Pids, CPU} {
		if leak, err := applyWrites(d, limitWrites(false, c, l, true, false)); err != nil || leak != "" {
			t.Fatalf("%s: leak %q, err %v", c, leak, err)
		}
	}
	for file, want := range map[string]string{
		"memory.limit_in_bytes":       "1073741824",
		"memory.memsw.limit_in_bytes": "1073741824",
		"pids.max":                    "7",
		"cpu.cfs_quota_us":            "25000",
		"cpu.cfs_period_us":           "100000",
	} {
		if got := readFake(t, d, file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
}

// A memory limit that swap can get around is not a memory limit: without the swap file, and with swap on
// the host, it is reported (fail closed); without swap on the host it holds.
func TestMemoryWithoutSwapAccounting(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		file := map[bool]string{true: "memory.max", false: "memory.limit_in_bytes"}[v2]
		d := fakeDir(t, file)
		ws := limitWrites(v2, Memory, Limits{MemoryBytes: 1 << 20}, true, false)
		if leak, err := applyWrites(d, ws); err != nil || !strings.Contains(leak, "swap") {
			t.Errorf("v2=%v with swap: leak %q, err %v; want a swap leak", v2, leak, err)
		}
		ws = limitWrites(v2, Memory, Limits{MemoryBytes: 1 << 20}, false, false)
		if leak, err := applyWrites(d, ws); err != nil || leak != "" {
			t.Errorf("v2=%v without swap: leak %q, err %v; want none", v2, leak, err)
		}
	}
}

// A missing mandatory control file is an error, never silently skipped.
func TestMissingLimitFileIsAnError(t *testing.T) {
	d := fakeDir(t) // no files at all
	for _, c := range []string{Memory, Pids, CPU} {
		if _, err := applyWrites(d, limitWrites(true, c, Limits{MemoryBytes: 1, Pids: 1, CPU: 1}, false, false)); err == nil {
			t.Errorf("%s: no error for a missing control file", c)
		}
		if _, err := os.Stat(filepath.Join(d, c+".max")); err == nil {
			t.Errorf("%s: a control file was created", c)
		}
	}
}

func TestCPUQuotaFloor(t *testing.T) {
	ws := limitWrites(true, CPU, Limits{CPU: 0.0001}, false, false)
	if ws[0].value != "1000 100000" {
		t.Errorf("cpu.max = %q, want the kernel's 1 ms minimum", ws[0].value)
	}
}

func TestValidation(t *testing.T) {
	for _, l := range []Limits{{MemoryBytes: -1}, {Pids: -1}, {CPU: -0.5}, {CPU: math.NaN()}, {CPU: math.Inf(1)}, {CPU: 1e300}} {
		if err := l.validate(); err == nil {
			t.Errorf("%+v accepted", l)
		}
	}
	for _, n := range []string{"", ".", "..", "../x", "a/b", "/abs", "cgroup.procs", "x\n", strings.Repeat("a", 300)} {
		if err := validName(n); err == nil {
			t.Errorf("name %q accepted", n)
		}
	}
	if err := validName("cordon-20240101.abc_1"); err != nil {
		t.Error(err)
	}
}

// create against a fake v2 tree: controllers are enabled through cgroup.subtree_control, one not offered
// is reported with a reason, and one whose limit file cannot be written is reported, not ignored.
func TestCreateOnFakeV2(t *testing.T) {
	cur := fakeDir(t, "cgroup.subtree_control")
	if err := os.WriteFile(filepath.Join(cur, "cgroup.controllers"), []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cur, "cgroup.subtree_control"), []byte("cpu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &host{hierarchies: []hierarchy{{v2: true, mount: cur, cur: cur}}, pid: 1}
	g, unenforced, err := create(h, "run", Limits{MemoryBytes: 1 << 20, Pids: 10, CPU: 1}, options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFake(t, cur, "cgroup.subtree_control"); got != "+memory" {
		t.Errorf("subtree_control written %q, want +memory (cpu was already on)", got)
	}
	if got := g.Paths(); len(got) != 1 || got[0] != filepath.Join(cur, "run") {
		t.Errorf("paths = %v", got)
	}
	// A plain directory has no memory.max or cpu.max: both unenforced; pids not offered at all.
	if strings.Join(unenforced, ",") != "memory,pids,cpu" {
		t.Errorf("unenforced = %v", unenforced)
	}
	if !strings.Contains(g.Why(Pids), "not available") || !strings.Contains(g.Why(Memory), "memory.max") {
		t.Errorf("reasons: pids %q, memory %q", g.Why(Pids), g.Why(Memory))
	}
	// An existing directory of that name is not taken over, and the error leaves nothing made.
	if _, _, err := create(h, "run", Limits{}, options{}); err == nil {
		t.Error("create reused an existing cgroup directory")
	}
	v1 := t.TempDir()
	h.hierarchies = append(h.hierarchies, hierarchy{controllers: []string{"pids"}, mount: v1, cur: v1})
	if _, _, err := create(h, "run2", Limits{Pids: 1}, options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cur, "run2")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := create(h, "run2", Limits{Pids: 1}, options{}); err == nil {
		t.Error("create reused an existing v1 cgroup directory")
	}
	if _, err := os.Stat(filepath.Join(cur, "run2")); err == nil {
		t.Error("a failed create left its v2 directory behind")
	}
}
