//go:build linux && (amd64 || arm64)

package seccomp

import (
	"reflect"
	"strings"
	"testing"
)

// TestCompileRejectsBadTables feeds the compiler tables with the mistakes it guards against; each
// would otherwise compile into a filter that does not do what the table says.
func TestCompileRejectsBadTables(t *testing.T) {
	a, _ := nativeABI()
	ok := Rule{Syscall: "mount", Nr: 165, Action: ActEPERM, Reason: "r"}
	with := func(f func(*Rule)) Rule { r := ok; f(&r); return r }
	cond := func(c Cond) Rule { return with(func(r *Rule) { r.When = []Cond{c} }) }
	many := make([]Const, 300)
	for i := range many {
		many[i] = k("v", uint32(i))
	}
	tests := []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"no name", []Rule{with(func(r *Rule) { r.Syscall = "" })}, "no syscall name"},
		{"no reason", []Rule{with(func(r *Rule) { r.Reason = "" })}, "no reason"},
		{"unknown action", []Rule{with(func(r *Rule) { r.Action = 7 })}, "unknown action"},
		{"x32 number", []Rule{with(func(r *Rule) { r.Nr = x32Bit | 165 })}, "outside the native range"},
		{"one number, two names", []Rule{ok, with(func(r *Rule) { r.Syscall = "umount" })}, "already mount"},
		{"rule after unconditional", []Rule{ok, cond(argIn(0, 1, k("one", 1)))}, "unreachable"},
		{"arg 6", []Rule{cond(argIn(6, 1, k("one", 1)))}, "out of range"},
		{"arg -1", []Rule{cond(argIn(-1, 1, k("one", 1)))}, "out of range"},
		{"zero mask", []Rule{cond(argIn(0, 0, k("zero", 0)))}, "zero mask"},
		{"no values", []Rule{cond(argIn(0, 1))}, "no values"},
		{"no operator", []Rule{cond(Cond{Arg: 0, Mask: 1, Values: []Const{k("one", 1)}})}, "unknown operator"},
		{"value outside mask", []Rule{cond(argIn(1, 0xf, k("SOCK_CLOEXEC", 0x80000)))}, "can never match"},
		{"jump too far for 8 bits", []Rule{cond(argIn(0, 0xffffffff, many...))}, "classic BPF allows 0 to 255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := compile(a, []Rule{ok}); err != nil {
				t.Fatalf("the good rule alone must compile: %v", err)
			}
			_, err := compile(a, tt.rules)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("compile: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestRulesAreFresh checks that a caller changing what Rules returned cannot change the filter: the
// package keeps no mutable table.
func TestRulesAreFresh(t *testing.T) {
	before, err := Program(Options{})
	if err != nil {
		t.Fatal(err)
	}
	rules := Rules(Options{})
	for i := range rules {
		rules[i].Action = ActAllow
		for j := range rules[i].When {
			rules[i].When[j].Values[0].Value ^= 1
		}
	}
	after, err := Program(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatal("changing the result of Rules changed the program")
	}
}

// TestNestingOpensOnlyUserNamespaces checks that AllowNesting removes exactly the user-namespace rules.
func TestNestingOpensOnlyUserNamespaces(t *testing.T) {
	strict, nested := Rules(Options{}), Rules(Options{AllowNesting: true})
	in := map[string]bool{}
	for _, r := range nested {
		in[r.String()] = true
	}
	var removed []string
	for _, r := range strict {
		if !in[r.String()] {
			removed = append(removed, r.Syscall)
		}
	}
	if want := []string{"unshare", "clone", "clone3"}; !reflect.DeepEqual(removed, want) || len(strict)-len(nested) != len(want) {
		t.Fatalf("nesting removed %v (%d rules), want exactly %v", removed, len(strict)-len(nested), want)
	}
}
