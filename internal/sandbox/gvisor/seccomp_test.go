//go:build linux && (amd64 || arm64)

package gvisor

import (
	"encoding/json"
	"math/rand"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/seccomp"
)

// tableVerdict is what cordon's own filter decides (seccomp.Rules' documented semantics): the first
// rule for the call whose conditions all hold on the arguments' low halves, else ALLOW.
func tableVerdict(rules []seccomp.Rule, name string, args [6]uint64) seccomp.Action {
	for _, r := range rules {
		if r.Syscall != name {
			continue
		}
		holds := true
		for _, c := range r.When {
			v := uint32(args[c.Arg]) & c.Mask
			in := false
			for _, k := range c.Values {
				in = in || v == k.Value
			}
			if (c.Op == seccomp.OneOf) != in {
				holds = false
			}
		}
		if holds {
			return r.Action
		}
	}
	return seccomp.ActAllow
}

// ociVerdict is what runsc makes of the OCI filter (runsc/specutils/seccomp.BuildProgram): the first
// entry naming the call whose comparisons hold, comparisons of one argument ORed (runc's legacy
// rule, which runsc keeps) and those of different arguments ANDed, MASKED_EQ on the whole 64 bits.
func ociVerdict(s *ociSeccomp, name string, args [6]uint64) string {
	for _, e := range s.Syscalls {
		named := false
		for _, n := range e.Names {
			named = named || n == name
		}
		if !named {
			continue
		}
		count := map[int]int{}
		for _, a := range e.Args {
			count[a.Index]++
		}
		multi := false
		for _, n := range count {
			multi = multi || n > 1
		}
		match := func(a ociArg) bool {
			if a.Op != ociMaskedEq {
				panic("unexpected operator " + a.Op)
			}
			return args[a.Index]&a.Value == a.ValueTwo
		}
		holds := !multi
		for _, a := range e.Args {
			if multi {
				holds = holds || match(a)
			} else {
				holds = holds && match(a)
			}
		}
		if holds {
			return e.Action
		}
	}
	return s.DefaultAction
}

// TestSeccompOCIMatchesTable checks the rendering against the table on the arguments that decide a
// verdict (each value a rule names, its neighbours, the same with a high half set, the extremes,
// random values): every call the native filter refuses is refused under runsc, every call it lets
// through is let through, and the errno is the one runsc can give (EPERM, or ENOSYS for TRACE).
// Without the ptrace guard, a self-tracer could answer clone3's TRACE: that guard is checked too.
func TestSeccompOCIMatchesTable(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	want := map[seccomp.Action]string{
		seccomp.ActAllow: ociAllow, seccomp.ActEPERM: ociErrno, seccomp.ActEAFNOSUPPORT: ociErrno,
		seccomp.ActEPROTONOSUPPORT: ociErrno, seccomp.ActENOSYS: ociTrace,
	}
	for _, opts := range []seccomp.Options{{}, {AllowNesting: true}} {
		rules := seccomp.Rules(opts)
		s, err := Seccomp(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatal(err)
		}
		// Candidate values per argument: what the rules name and its neighbours.
		var cand [6][]uint64
		for _, r := range rules {
			for _, c := range r.When {
				for _, k := range c.Values {
					for _, v := range []uint64{uint64(k.Value), uint64(k.Value) - 1, uint64(k.Value) + 1, uint64(k.Value) | 1<<32, uint64(k.Value) | 0xffffffff00000000} {
						cand[c.Arg] = append(cand[c.Arg], v&0xffffffffffffffff)
					}
				}
			}
		}
		for i := range cand {
			cand[i] = append(cand[i], 0, 0xffffffff, 1<<32, ^uint64(0), 0x80, 0x4200)
		}
		names := map[string]bool{"ptrace": true, "read": true}
		for _, r := range rules {
			names[r.Syscall] = true
		}
		checked := 0
		for name := range names {
			for n := 0; n < 3000; n++ {
				var args [6]uint64
				for i := range args {
					if rng.Intn(4) == 0 {
						args[i] = rng.Uint64() >> uint(rng.Intn(64))
					} else {
						args[i] = cand[i][rng.Intn(len(cand[i]))]
					}
				}
				native, got := tableVerdict(rules, name, args), ociVerdict(s, name, args)
				guarded := !opts.AllowNesting && name == "ptrace" && uint32(args[0]) == unix.PTRACE_SETOPTIONS && args[3]&ptraceOTraceSeccomp != 0
				if guarded && native == seccomp.ActAllow {
					native = seccomp.ActEPERM // the ptrace guard's addition
				}
				if got != want[native] {
					t.Fatalf("nesting=%v %s%x: native filter says %v, the OCI filter %s", opts.AllowNesting, name, args, native, got)
				}
				checked++
			}
		}
		// The guard: PTRACE_SETOPTIONS with PTRACE_O_TRACESECCOMP (plus other options) is refused when
		// any verdict is TRACE, and without it setting options still works.
		setopts := func(data uint64) string {
			return ociVerdict(s, "ptrace", [6]uint64{unix.PTRACE_SETOPTIONS, 1, 0, data})
		}
		if opts.AllowNesting {
			if setopts(ptraceOTraceSeccomp) != ociAllow {
				t.Errorf("nesting: no TRACE verdict, yet the ptrace guard is there")
			}
		} else if setopts(ptraceOTraceSeccomp|unix.PTRACE_O_TRACECLONE) != ociErrno || setopts(unix.PTRACE_O_TRACECLONE) != ociAllow {
			t.Errorf("the ptrace guard: %s with TRACESECCOMP, %s without", setopts(ptraceOTraceSeccomp|unix.PTRACE_O_TRACECLONE), setopts(unix.PTRACE_O_TRACECLONE))
		}
		t.Logf("nesting=%v: %d OCI entries, %d calls compared", opts.AllowNesting, len(s.Syscalls), checked)
	}
}

// TestComplementBlocks: the blocks cover exactly the values not given, each once.
func TestComplementBlocks(t *testing.T) {
	vals := []uint32{0, 1, 2, 10, 16, 0x20000, 0x20008, 0xffffffff}
	bs := complementBlocks(vals)
	in := func(x uint32) int {
		n := 0
		for _, b := range bs {
			if x&b.mask == b.value {
				n++
			}
		}
		return n
	}
	for _, v := range vals {
		if in(v) != 0 {
			t.Errorf("%#x is covered", v)
		}
	}
	rng := rand.New(rand.NewSource(2))
	for _, x := range []uint32{3, 9, 11, 15, 17, 0x1ffff, 0x20001, 0x20007, 0x20009, 0xfffffffe, 0x80000000} {
		if in(x) != 1 {
			t.Errorf("%#x covered %d times", x, in(x))
		}
	}
	for n := 0; n < 10000; n++ {
		x := rng.Uint32()
		want := 1
		for _, v := range vals {
			if x == v {
				want = 0
			}
		}
		if in(x) != want {
			t.Fatalf("%#x covered %d times, want %d", x, in(x), want)
		}
	}
	if len(bs) > 32*len(vals) {
		t.Errorf("%d blocks for %d values", len(bs), len(vals))
	}
	if got := complementBlocks(nil); len(got) != 1 || got[0].mask != 0 {
		t.Errorf("the complement of nothing is %v", got)
	}
}

// TestSeccompRefusesWhatItCannotRender: two conditions on one argument, and a "none of" on part of
// an argument, are errors rather than a filter that says something else.
func TestSeccompRefusesWhatItCannotRender(t *testing.T) {
	one := []seccomp.Const{{Name: "x", Value: 1}}
	if _, err := dnf([]seccomp.Cond{{Arg: 1, Mask: 0xff, Op: seccomp.OneOf, Values: one}, {Arg: 1, Mask: 0xff00, Op: seccomp.OneOf, Values: []seccomp.Const{{Name: "y", Value: 0x100}}}}); err == nil {
		t.Error("two conditions on argument 1 rendered")
	}
	if _, err := dnf([]seccomp.Cond{{Arg: 0, Mask: 0xf, Op: seccomp.NoneOf, Values: one}}); err == nil {
		t.Error("a masked none-of rendered")
	}
}

// TestSeccompRenderFallback: two "none of" rules that order cannot say (each allows what the other
// refuses) are rendered with the complement's blocks, and still decide as the table does.
func TestSeccompRenderFallback(t *testing.T) {
	none := func(vs ...uint32) seccomp.Cond {
		c := seccomp.Cond{Arg: 0, Mask: 0xffffffff, Op: seccomp.NoneOf}
		for _, v := range vs {
			c.Values = append(c.Values, seccomp.Const{Name: "v", Value: v})
		}
		return c
	}
	rules := []seccomp.Rule{
		{Syscall: "personality", Action: seccomp.ActEPERM, Reason: "a", When: []seccomp.Cond{none(1, 2)}},
		{Syscall: "personality", Action: seccomp.ActEPERM, Reason: "b", When: []seccomp.Cond{none(2, 3)}},
	}
	entries, err := render(rules)
	if err != nil {
		t.Fatal(err)
	}
	s := &ociSeccomp{DefaultAction: ociAllow, Syscalls: entries}
	for _, x := range []uint64{0, 1, 2, 3, 4, 2 | 1<<32, 0xffffffff, ^uint64(0)} {
		args := [6]uint64{x}
		want := ociAllow
		if tableVerdict(rules, "personality", args) != seccomp.ActAllow {
			want = ociErrno
		}
		if got := ociVerdict(s, "personality", args); got != want {
			t.Errorf("personality(%#x): %s, want %s", x, got, want)
		}
	}
	if _, err := render([]seccomp.Rule{rules[0], {Syscall: "personality", Action: seccomp.ActENOSYS, Reason: "c"}}); err == nil {
		t.Error("rules of one call with different actions rendered")
	}
}
