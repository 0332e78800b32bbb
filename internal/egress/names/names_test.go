package names_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/egress"
	"github.com/cordon-sandbox/cordon/internal/egress/names"
)

var _ egress.Names = (*names.Mapper)(nil)

func mustNew(t *testing.T) *names.Mapper {
	t.Helper()
	m, err := names.New()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewRanges(t *testing.T) {
	a, b := mustNew(t), mustNew(t)
	v4, v6 := a.Ranges()
	if v4 != netip.MustParsePrefix("198.18.0.0/15") {
		t.Errorf("v4 range %v", v4)
	}
	if v6.Bits() != 64 || !netip.MustParsePrefix("fd00::/8").Contains(v6.Addr()) {
		t.Errorf("v6 range %v is not a ULA /64", v6)
	}
	if _, bv6 := b.Ranges(); bv6 == v6 {
		t.Errorf("two runs got the same IPv6 prefix %v", v6)
	}
}

func TestAssignAndLookup(t *testing.T) {
	m := mustNew(t)
	_, p6 := m.Ranges()
	want6 := func(last byte) netip.Addr {
		b := p6.Addr().As16()
		b[15] = last
		return netip.AddrFrom16(b)
	}
	tests := []struct {
		name   string
		v4     string
		v6last byte
	}{
		{"api.example.com", "198.18.0.1", 1},
		{"b.example", "198.18.0.2", 2},
		{"API.Example.COM.", "198.18.0.1", 1}, // same name: case and a trailing dot do not count
		{"c.example", "198.18.0.3", 3},
	}
	for _, tt := range tests {
		v4, v6, err := m.Assign(tt.name)
		if err != nil {
			t.Fatalf("Assign(%q): %v", tt.name, err)
		}
		if v4 != netip.MustParseAddr(tt.v4) || v6 != want6(tt.v6last) {
			t.Errorf("Assign(%q) = %v, %v; want %v, %v", tt.name, v4, v6, tt.v4, want6(tt.v6last))
		}
		canon := strings.TrimSuffix(strings.ToLower(tt.name), ".")
		for _, a := range []netip.Addr{v4, v6, netip.AddrFrom16(v4.As16())} {
			if got, ok := m.Lookup(a); !ok || got != canon {
				t.Errorf("Lookup(%v) = %q, %v; want %q", a, got, ok, canon)
			}
		}
	}
	if m.Len() != 3 {
		t.Errorf("Len = %d, want 3", m.Len())
	}
	for _, a := range []string{"198.18.0.4", "198.18.0.0", "198.19.255.255", "198.17.255.255", "127.0.0.1", "10.0.0.1", "::1",
		want6(4).String(), want6(0).String(), "fd00::1", "::ffff:198.18.0.4"} {
		if got, ok := m.Lookup(netip.MustParseAddr(a)); ok {
			t.Errorf("Lookup(%s) = %q; an address never handed out must map to no name", a, got)
		}
	}
	// Another run's address maps to nothing here, although it is in the same kind of range.
	other := mustNew(t)
	_, o6, _ := other.Assign("api.example.com")
	if got, ok := m.Lookup(o6); ok {
		t.Errorf("another run's %v maps to %q", o6, got)
	}
}

func TestAssignRefusesNonNames(t *testing.T) {
	m := mustNew(t)
	for _, n := range []string{"", ".", "a..b", `a\.b`, "a b", "x\x00y", "*.a.example", "\u212aa.example",
		strings.Repeat("a", 64) + ".example", strings.Repeat("a.", 127) + "ab"} {
		if v4, _, err := m.Assign(n); err == nil {
			t.Errorf("Assign(%q) = %v, want an error", n, v4)
		}
	}
	if m.Len() != 0 {
		t.Errorf("refused names used %d addresses", m.Len())
	}
	// The longest legal name is accepted, so the refusals above are about form, not length alone.
	longest := strings.Repeat(strings.Repeat("a", 63)+".", 3) + strings.Repeat("b", 61)
	if _, _, err := m.Assign(longest); err != nil {
		t.Errorf("Assign of a 253-byte name: %v", err)
	}
}

// TestBounded exhausts the real default range: the next name gets ErrExhausted, never a reused or
// out-of-range address, and every name assigned before keeps its address.
func TestBounded(t *testing.T) {
	m := mustNew(t)
	const capacity = 1<<17 - 2
	var last netip.Addr
	for i := range capacity {
		v4, _, err := m.Assign(fmt.Sprintf("h%d.example", i))
		if err != nil {
			t.Fatalf("name %d: %v", i, err)
		}
		last = v4
	}
	if last != netip.MustParseAddr("198.19.255.254") {
		t.Errorf("last address %v, want 198.19.255.254", last)
	}
	if _, _, err := m.Assign("one-more.example"); !errors.Is(err, names.ErrExhausted) {
		t.Fatalf("beyond the range: err = %v, want ErrExhausted", err)
	}
	if v4, _, err := m.Assign("h7.example"); err != nil || v4 != netip.MustParseAddr("198.18.0.8") {
		t.Errorf("known name after exhaustion: %v, %v", v4, err)
	}
	if n, ok := m.Lookup(last); !ok || n != fmt.Sprintf("h%d.example", capacity-1) {
		t.Errorf("Lookup(%v) = %q, %v", last, n, ok)
	}
}

func TestSmallRanges(t *testing.T) {
	m, err := names.NewRanges(netip.MustParsePrefix("10.9.0.0/30"), netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"a.example", "b.example"} {
		v4, v6, err := m.Assign(n)
		if err != nil || v4 != netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)}) || v6.IsValid() {
			t.Errorf("Assign(%q) = %v, %v, %v", n, v4, v6, err)
		}
	}
	if _, _, err := m.Assign("c.example"); !errors.Is(err, names.ErrExhausted) {
		t.Errorf("a /30 holds two names; third: %v", err)
	}
	// The smaller range bounds both: a /126 IPv6 range allows two names even with a large IPv4 range.
	m, err = names.NewRanges(names.DefaultV4(), netip.MustParsePrefix("fd00::/126"))
	if err != nil {
		t.Fatal(err)
	}
	m.Assign("a.example")
	m.Assign("b.example")
	if _, _, err := m.Assign("c.example"); !errors.Is(err, names.ErrExhausted) {
		t.Errorf("a /126 holds two names; third: %v", err)
	}
	for _, tt := range []struct{ v4, v6 string }{
		{"fd00::/64", ""}, {"10.0.0.0/31", ""}, {"10.0.0.0/8", "10.0.0.0/8"}, {"10.0.0.0/8", "fd00::/48"}, {"10.0.0.0/8", "::ffff:10.0.0.0/104"},
	} {
		v4 := netip.MustParsePrefix(tt.v4)
		var v6 netip.Prefix
		if tt.v6 != "" {
			v6 = netip.MustParsePrefix(tt.v6)
		}
		if _, err := names.NewRanges(v4, v6); err == nil {
			t.Errorf("NewRanges(%v, %v) accepted", v4, v6)
		}
	}
}

// TestConcurrent assigns the same names from many goroutines in different orders while others look
// addresses up: every name must end with exactly one address and every address with one name.
func TestConcurrent(t *testing.T) {
	m := mustNew(t)
	const workers, count = 8, 500
	got := make([]map[string]netip.Addr, workers)
	var wg sync.WaitGroup
	for w := range workers {
		got[w] = map[string]netip.Addr{}
		wg.Go(func() {
			for i := range count {
				n := fmt.Sprintf("n%d.example", (i*(w+1)+w)%count)
				v4, v6, err := m.Assign(strings.ToUpper(n))
				if err != nil {
					t.Error(err)
					return
				}
				if name, ok := m.Lookup(v6); !ok || name != n {
					t.Errorf("Lookup(%v) = %q, want %q", v6, name, n)
				}
				got[w][n] = v4
			}
		})
	}
	wg.Wait()
	if m.Len() != count {
		t.Fatalf("Len = %d, want %d", m.Len(), count)
	}
	seen := map[netip.Addr]string{}
	for _, g := range got {
		for n, a := range g {
			if a != got[0][n] && got[0][n].IsValid() {
				t.Errorf("%s got %v and %v", n, a, got[0][n])
			}
			if o, ok := seen[a]; ok && o != n {
				t.Errorf("%v assigned to %s and %s", a, o, n)
			}
			seen[a] = n
		}
	}
}

// FuzzAssign checks that whatever string is offered, an assigned address maps back to the name in
// canonical form, which is a plain host name, and that the name's case and trailing dot do not matter.
func FuzzAssign(f *testing.F) {
	for _, s := range []string{"api.example.com", "API.Example.COM.", "a..b", `a\.b`, "\u212aa.example", "x\x00y", strings.Repeat("a", 64)} {
		f.Add(s)
	}
	m, err := names.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v4, v6, err := m.Assign(name)
		if err != nil {
			return
		}
		n, ok := m.Lookup(v4)
		if !ok || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" || n != strings.TrimSuffix(strings.ToLower(name), ".") {
			t.Fatalf("Assign(%q) = %v, which maps to %q (%v)", name, v4, n, ok)
		}
		if n6, _ := m.Lookup(v6); n6 != n {
			t.Fatalf("v6 %v maps to %q, v4 to %q", v6, n6, n)
		}
		if again, _, err := m.Assign(strings.ToUpper(n) + "."); err != nil || again != v4 {
			t.Fatalf("upper-case %q got %v (%v), want %v", n, again, err, v4)
		}
	})
}
