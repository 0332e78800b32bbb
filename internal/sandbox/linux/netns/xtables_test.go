//go:build linux

package netns

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/nstest"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// Each extension encodes to its kernel struct's size (x_tables.h's, padded to 8) and decodes to
// the name, revision and data it was given; each entry's ip struct carries its fields at the
// offsets of ip_tables.h and ip6_tables.h.
func TestXTEncodeDecodeRoundTrip(t *testing.T) {
	v4, v6 := xtFamilies()[0], xtFamilies()[1]
	cases := []struct {
		name string
		fam  xtFamily
		rule xtRule
		// size is the entry's whole size; ip checks its ip struct.
		size int
		ip   func(t *testing.T, ip []byte)
	}{
		{"standard accept", v4, xtRule{target: standard(xtAccept)}, 112 + 40, func(t *testing.T, ip []byte) {
			if !bytes.Equal(ip, make([]byte, 84)) {
				t.Errorf("an unconditional rule's ipt_ip is not all zero: %x", ip)
			}
		}},
		{"error target", v6, xtRule{target: errorTarget("ERROR")}, 168 + 64, nil},
		{"owner uid", v4, xtRule{matches: []xtExt{ownerMatch(15000)}, target: standard(xtAccept)}, 112 + 56 + 40, nil},
		{"udp dport 53 redirect", v4, xtRule{proto: unix.IPPROTO_UDP, matches: []xtExt{udpMatch(0, 53)}, target: redirect4(15053)}, 112 + 48 + 56,
			func(t *testing.T, ip []byte) {
				if p := binary.NativeEndian.Uint16(ip[80:]); p != unix.IPPROTO_UDP || ip[82] != 0 {
					t.Errorf("proto %d flags %#x, want udp and no flags", p, ip[82])
				}
			}},
		{"tcp redirect ipv6", v6, xtRule{proto: unix.IPPROTO_TCP, target: redirect6(15001)}, 168 + 72,
			func(t *testing.T, ip []byte) {
				if p := binary.NativeEndian.Uint16(ip[128:]); p != unix.IPPROTO_TCP || ip[131] != ip6tFProto {
					t.Errorf("proto %d flags %#x, want tcp and IP6T_F_PROTO", p, ip[131])
				}
			}},
		{"loopback destination", v4, xtRule{dst: netip.MustParsePrefix("127.0.0.0/8"), target: standard(xtAccept)}, 112 + 40,
			func(t *testing.T, ip []byte) {
				if !bytes.Equal(ip[4:8], []byte{127, 0, 0, 0}) || !bytes.Equal(ip[12:16], []byte{255, 0, 0, 0}) {
					t.Errorf("dst %x mask %x, want 127.0.0.0/255.0.0.0", ip[4:8], ip[12:16])
				}
			}},
		{"loopback destination ipv6", v6, xtRule{dst: netip.MustParsePrefix("::1/128"), target: standard(xtAccept)}, 168 + 40,
			func(t *testing.T, ip []byte) {
				if !bytes.Equal(ip[16:32], netip.IPv6Loopback().AsSlice()) || !bytes.Equal(ip[48:64], bytes.Repeat([]byte{0xff}, 16)) {
					t.Errorf("dst %x mask %x, want ::1/128", ip[16:32], ip[48:64])
				}
			}},
		{"input interface", v4, xtRule{inIface: "lo", target: standard(xtAccept)}, 112 + 40,
			func(t *testing.T, ip []byte) {
				if string(ip[16:19]) != "lo\x00" || !bytes.Equal(ip[48:52], []byte{0xff, 0xff, 0xff, 0}) {
					t.Errorf("iniface %q mask %x, want lo and ff ff ff", ip[16:32], ip[48:64])
				}
			}},
		{"tcp flags", v6, xtRule{proto: unix.IPPROTO_TCP, matches: []xtExt{tcpMatch(0, tcpFlagSYN|tcpFlagACK, tcpFlagSYN)}, target: standard(xtDrop)}, 168 + 48 + 40, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := encodeEntry(c.fam, c.rule)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != c.size {
				t.Errorf("entry of %d bytes, want %d", len(b), c.size)
			}
			got, err := decodeEntries(c.fam, b)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("%d entries decoded, want 1", len(got))
			}
			e := got[0]
			if len(e.matches) != len(c.rule.matches) {
				t.Fatalf("%d matches decoded, want %d", len(e.matches), len(c.rule.matches))
			}
			for i, m := range c.rule.matches {
				checkExt(t, "match", e.matches[i], m)
			}
			checkExt(t, "target", e.target, c.rule.target)
			if c.ip != nil {
				c.ip(t, e.ip)
			}
		})
	}
}

// checkExt compares a decoded extension with the one encoded: the data comes back padded with zeros.
func checkExt(t *testing.T, what string, got xtExtView, want xtExt) {
	t.Helper()
	if got.name != want.name || got.rev != want.rev {
		t.Errorf("%s %q/%d, want %q/%d", what, got.name, got.rev, want.name, want.rev)
	}
	if len(got.data)+xtExtHeaderLen != align8(xtExtHeaderLen+len(want.data)) ||
		!bytes.Equal(got.data[:len(want.data)], want.data) || !bytes.Equal(got.data[len(want.data):], make([]byte, len(got.data)-len(want.data))) {
		t.Errorf("%s data %x, want %x padded with zeros", what, got.data, want.data)
	}
}

// The fields of the extensions that carry values sit where the kernel's structs keep them.
func TestXTExtensionLayouts(t *testing.T) {
	cases := []struct {
		name string
		ext  xtExt
		want []byte
	}{
		{"standard drop", standard(xtDrop), binary.NativeEndian.AppendUint32(nil, 0xffffffff)},
		{"standard accept", standard(xtAccept), binary.NativeEndian.AppendUint32(nil, 0xfffffffe)},
		{"redirect4", redirect4(0x3a99), cat4(u32(1), u32(unix.NF_NAT_RANGE_PROTO_SPECIFIED), make([]byte, 8), []byte{0x3a, 0x99, 0x3a, 0x99})},
		{"redirect6", redirect6(0x3a99), cat4(u32(unix.NF_NAT_RANGE_PROTO_SPECIFIED), make([]byte, 32), []byte{0x3a, 0x99, 0x3a, 0x99})},
		{"tcp dport 53", tcpMatch(53, 0, 0), cat4(u16(0), u16(0xffff), u16(53), u16(53), []byte{0, 0, 0, 0})},
		{"tcp syn", tcpMatch(0, 0x12, 0x02), cat4(u16(0), u16(0xffff), u16(0), u16(0xffff), []byte{0, 0x12, 0x02, 0})},
		{"udp sport 53", udpMatch(53, 0), cat4(u16(53), u16(53), u16(0), u16(0xffff), []byte{0, 0})},
		{"owner 15000", ownerMatch(15000), cat4(u32(15000), u32(15000), u32(0), u32(0), []byte{1, 0, 0, 0})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !bytes.Equal(c.ext.data, c.want) {
				t.Errorf("data %x, want %x", c.ext.data, c.want)
			}
		})
	}
}

func u16(v uint16) []byte         { return binary.NativeEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte         { return binary.NativeEndian.AppendUint32(nil, v) }
func cat4(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// The pod's tables lay out as iptables does: each hook's entry at its first rule, its underflow
// at its policy, the ERROR entry last; and they decode back to as many entries as were written.
func TestXTPodTablesLayout(t *testing.T) {
	for _, set := range podXTTables(testPorts(), podGatewayUID, nil) {
		for _, tbl := range set.tables {
			enc, err := encodeTable(set.fam, tbl)
			if err != nil {
				t.Fatalf("%s %s: %v", set.fam.name, tbl.name, err)
			}
			entries, err := decodeEntries(set.fam, enc.entries)
			if err != nil {
				t.Fatalf("%s %s: %v", set.fam.name, tbl.name, err)
			}
			if uint32(len(entries)) != enc.numEntries {
				t.Errorf("%s %s: %d entries decoded, %d written", set.fam.name, tbl.name, len(entries), enc.numEntries)
			}
			at := map[int]xtEntryView{}
			for _, e := range entries {
				at[e.offset] = e
			}
			if last := entries[len(entries)-1]; last.target.name != "ERROR" {
				t.Errorf("%s %s: the last entry is %s, want the ERROR target", set.fam.name, tbl.name, last)
			}
			for _, c := range tbl.chains {
				u, ok := at[int(enc.underflow[c.hook])]
				if !ok || u.target.name != "" || !bytes.Equal(u.target.data[:4], binary.NativeEndian.AppendUint32(nil, uint32(c.policy))) || len(u.matches) != 0 || !bytes.Equal(u.ip, make([]byte, set.fam.ipLen)) {
					t.Errorf("%s %s hook %d: underflow %s is not the unconditional policy %d", set.fam.name, tbl.name, c.hook, u, c.policy)
				}
				if _, ok := at[int(enc.hookEntry[c.hook])]; !ok {
					t.Errorf("%s %s hook %d: enters at %d, where no entry starts", set.fam.name, tbl.name, c.hook, enc.hookEntry[c.hook])
				}
				if want := int(enc.underflow[c.hook]) - int(enc.hookEntry[c.hook]); (want == 0) != (len(c.rules) == 0) {
					t.Errorf("%s %s hook %d: %d rules between %d and %d", set.fam.name, tbl.name, c.hook, len(c.rules), enc.hookEntry[c.hook], enc.underflow[c.hook])
				}
			}
			if want := map[string]uint32{"filter": 0x0e, "nat": 0x1b}[tbl.name]; enc.validHooks != want {
				t.Errorf("%s %s: valid hooks %#x, want %#x (the kernel's for the table)", set.fam.name, tbl.name, enc.validHooks, want)
			}
		}
	}
}

// compareTable accepts the table as written and refuses one changed anywhere that matters: an
// entry's uid, port, address, verdict or extension name, a hook's offset, a missing entry. The
// kernel's own fields (counters, comefrom) may differ.
func TestXTCompareRefusesChanges(t *testing.T) {
	set := podXTTables(testPorts(), podGatewayUID, nil)[0]
	enc, err := encodeTable(set.fam, set.tables[1]) // nat: owner, udp, tcp, redirects
	if err != nil {
		t.Fatal(err)
	}
	info := func(e *xtEncoded) xtInfo {
		return xtInfo{validHooks: e.validHooks, hookEntry: e.hookEntry, underflow: e.underflow, numEntries: e.numEntries, size: uint32(len(e.entries))}
	}
	entries, err := decodeEntries(set.fam, enc.entries)
	if err != nil {
		t.Fatal(err)
	}
	var first xtEntryView // the exempt rule: owner match, ACCEPT
	for _, e := range entries {
		if len(e.matches) == 1 && e.matches[0].name == "owner" {
			first = e
			break
		}
	}
	if first.ip == nil {
		t.Fatal("no owner rule in the nat table")
	}
	ownerData := first.offset + set.fam.entryLen + xtExtHeaderLen
	cases := []struct {
		name   string
		change func(in *xtInfo, b []byte) []byte
		ok     bool
	}{
		{"unchanged", func(in *xtInfo, b []byte) []byte { return b }, true},
		{"the kernel's counters and comefrom", func(in *xtInfo, b []byte) []byte {
			for _, e := range entries {
				binary.NativeEndian.PutUint32(b[e.offset+set.fam.ipLen+8:], 0x1b) // comefrom
				copy(b[e.offset+96:], bytes.Repeat([]byte{7}, 16))                // counters
			}
			return b
		}, true},
		{"another uid", func(in *xtInfo, b []byte) []byte {
			binary.NativeEndian.PutUint32(b[ownerData:], podGatewayUID+1)
			return b
		}, false},
		{"the owner match unset", func(in *xtInfo, b []byte) []byte { b[ownerData+16] = 0; return b }, false},
		{"another redirect port", func(in *xtInfo, b []byte) []byte {
			i := bytes.Index(b, []byte{0, 53, 0, 53}) // the DNS redirect's port range
			if i < 0 {
				t.Fatal("no redirect to port 53 in the nat table")
			}
			b[i+1], b[i+3] = 54, 54
			return b
		}, false},
		{"ACCEPT made DROP", func(in *xtInfo, b []byte) []byte {
			to := first.offset + int(binary.NativeEndian.Uint16(b[first.offset+set.fam.targetOffset:]))
			binary.NativeEndian.PutUint32(b[to+xtExtHeaderLen:], 0xffffffff) // xtDrop
			return b
		}, false},
		{"a match renamed", func(in *xtInfo, b []byte) []byte {
			copy(b[first.offset+set.fam.entryLen+2:], "mark\x00")
			return b
		}, false},
		{"a hook moved", func(in *xtInfo, b []byte) []byte { in.hookEntry[unix.NF_INET_LOCAL_OUT] += 8; return b }, false},
		{"hooks lost", func(in *xtInfo, b []byte) []byte { in.validHooks &^= 1 << unix.NF_INET_LOCAL_OUT; return b }, false},
		{"the last entry missing", func(in *xtInfo, b []byte) []byte {
			in.numEntries--
			last := entries[len(entries)-1].offset
			in.size = uint32(last)
			return b[:last]
		}, false},
		{"truncated", func(in *xtInfo, b []byte) []byte { return b[:len(b)-8] }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := info(enc)
			b := c.change(&in, bytes.Clone(enc.entries))
			err := compareTable(set.fam, enc, in, b)
			if c.ok && err != nil {
				t.Errorf("refused: %v", err)
			}
			if !c.ok && err == nil {
				t.Error("accepted")
			}
		})
	}
}

// Malformed entries are errors, never a panic or a short read.
func TestXTDecodeRefusesMalformed(t *testing.T) {
	v4 := xtFamilies()[0]
	good, err := encodeEntry(v4, xtRule{proto: unix.IPPROTO_TCP, matches: []xtExt{tcpMatch(53, 0, 0)}, target: redirect4(53)})
	if err != nil {
		t.Fatal(err)
	}
	set16 := func(off int, v uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.NativeEndian.PutUint16(b[off:], v); return b }
	}
	cases := []struct {
		name   string
		change func([]byte) []byte
	}{
		{"shorter than an entry", func(b []byte) []byte { return b[:100] }},
		{"target offset inside the ip struct", set16(v4.targetOffset, 50)},
		{"next offset past the end", set16(v4.nextOffset, uint16(len(good)+8))},
		{"next offset unaligned", set16(v4.nextOffset, uint16(len(good)-4))},
		{"match size zero", set16(v4.entryLen, 0)},
		{"match size past the target", set16(v4.entryLen, 200)},
		{"target size short of its room", set16(len(good)-56, 48)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := decodeEntries(v4, c.change(bytes.Clone(good))); err == nil {
				t.Error("decoded")
			}
		})
	}
}

// The encoder refuses what it cannot say: a prefix with host bits, an address of the other family,
// names that do not fit, chains out of hook order, a policy that is not ACCEPT or DROP.
func TestXTEncodeRefuses(t *testing.T) {
	v4 := xtFamilies()[0]
	for _, r := range []xtRule{
		{dst: netip.MustParsePrefix("127.0.0.1/8"), target: standard(xtAccept)},
		{dst: netip.MustParsePrefix("::1/128"), target: standard(xtAccept)},
		{inIface: "a-very-long-interface", target: standard(xtAccept)},
		{target: xtExt{name: strings.Repeat("x", 29)}},
	} {
		if _, err := encodeEntry(v4, r); err == nil {
			t.Errorf("encoded %+v", r)
		}
	}
	for _, tbl := range []xtTable{
		{name: "filter", chains: []xtChain{{hook: 3, policy: xtDrop}, {hook: 1, policy: xtDrop}}},
		{name: "filter", chains: []xtChain{{hook: 1, policy: 5}}},
		{name: strings.Repeat("t", 32)},
	} {
		if _, err := encodeTable(v4, tbl); err == nil {
			t.Errorf("encoded table %+v", tbl)
		}
	}
}

// On this machine's kernel (legacy ip_tables and ip6_tables, where built), InstallPodXT's tables
// are accepted, read back as written, and replaced by a second install; verification refuses them
// as another uid's; and InstallPodXT refuses to exempt root or take bad ports before it writes
// anything. The kernel is a second reader of the encoding gVisor reads (TestPodXTInGVisor).
func TestInstallPodXTOnLinux(t *testing.T) {
	n := nstest.New(t)
	if err := n.Do(func() error { return InstallPodXT(testPorts(), podGatewayUID) }); err != nil {
		skipWithoutXT(t, n, err)
		t.Fatalf("InstallPodXT: %v", err)
	}
	verify := func(uid uint32) error {
		return n.Do(func() error {
			for _, set := range podXTTables(testPorts(), uid, nil) {
				fd, err := unix.Socket(set.fam.domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
				if err != nil {
					return err
				}
				defer func() { _ = unix.Close(fd) }()
				for _, tbl := range set.tables {
					enc, err := encodeTable(set.fam, tbl)
					if err != nil {
						return err
					}
					if err := verifyTable(fd, set.fam, tbl, enc); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := verify(podGatewayUID); err != nil {
		t.Errorf("the tables do not read back: %v", err)
	}
	if err := verify(podGatewayUID + 1); err == nil {
		t.Error("verification accepted the tables as another uid's")
	}
	if err := n.Do(func() error { return InstallPodXT(testPorts(), podGatewayUID) }); err != nil {
		t.Errorf("InstallPodXT again: %v", err)
	}
	for _, c := range []struct {
		ports sandbox.EgressPorts
		uid   uint32
		want  string
	}{{testPorts(), 0, "uid 0"}, {sandbox.EgressPorts{}, podGatewayUID, "ports"}} {
		m := nstest.New(t)
		err := m.Do(func() error { return InstallPodXT(c.ports, c.uid) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("InstallPodXT(%+v, %d): %v, want an error about %s", c.ports, c.uid, err, c.want)
		}
		if err := m.Do(func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
			if err != nil {
				return err
			}
			defer func() { _ = unix.Close(fd) }()
			in, err := getInfo(fd, xtFamilies()[0], "filter")
			if err != nil {
				return err
			}
			if in.numEntries != 4 { // the kernel's empty filter table: three policies and the end
				return errors.New("the filter table was written")
			}
			return nil
		}); err != nil {
			t.Errorf("a refused InstallPodXT: %v", err)
		}
	}
}

// skipWithoutXT skips the test when this kernel has no legacy xtables at all (no ip_tables to ask).
func skipWithoutXT(t *testing.T, n *nstest.NS, err error) {
	t.Helper()
	ierr := n.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer func() { _ = unix.Close(fd) }()
		_, err = getInfo(fd, xtFamilies()[0], "filter")
		return err
	})
	if ierr != nil {
		t.Skipf("this kernel has no legacy ip_tables (%v); InstallPodXT said: %v", ierr, err)
	}
}

// iptables itself (its legacy save commands, where installed) reads InstallPodXT's tables as the
// rules podXTTables means: a client that parses the kernel's answer independently of decodeEntries.
func TestInstallPodXTReadByIptablesSave(t *testing.T) {
	n := nstest.New(t)
	if err := n.Do(func() error { return InstallPodXT(testPorts(), podGatewayUID) }); err != nil {
		skipWithoutXT(t, n, err)
		t.Fatalf("InstallPodXT: %v", err)
	}
	nat := func(lo string) string {
		return `*nat
:PREROUTING ACCEPT
:INPUT ACCEPT
:OUTPUT ACCEPT
:POSTROUTING ACCEPT
-A OUTPUT -m owner --uid-owner 15000 -j ACCEPT
-A OUTPUT -p udp -m udp --dport 53 -j REDIRECT --to-ports 53
-A OUTPUT -p tcp -m tcp --dport 53 -j REDIRECT --to-ports 53
-A OUTPUT -d ` + lo + ` -j ACCEPT
-A OUTPUT -p tcp -j REDIRECT --to-ports 15001
COMMIT
`
	}
	filter := func(lo, icmp string) string {
		return `*filter
:INPUT DROP
:FORWARD DROP
:OUTPUT DROP
-A INPUT -i lo -j ACCEPT
-A INPUT -p tcp -m tcp --tcp-flags SYN,ACK SYN -j DROP
-A INPUT -p tcp -j ACCEPT
-A INPUT -p udp -m udp --sport 53 -j ACCEPT
` + icmp + `-A OUTPUT -m owner --uid-owner 15000 -j ACCEPT
-A OUTPUT -d ` + lo + ` -p tcp -j ACCEPT
-A OUTPUT -d ` + lo + ` -p udp -j ACCEPT
COMMIT
`
	}
	for _, c := range []struct{ cmd, want string }{
		{"iptables-legacy-save", nat("127.0.0.0/8") + filter("127.0.0.0/8", "")},
		{"ip6tables-legacy-save", nat("::1/128") + filter("::1/128", "-A INPUT -p ipv6-icmp -j ACCEPT\n")},
	} {
		path, err := exec.LookPath(c.cmd)
		if err != nil {
			t.Logf("no %s here: %v", c.cmd, err)
			continue
		}
		out, err := n.Command(context.Background(), 0, 0, path).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", c.cmd, err, out)
		}
		var got strings.Builder
		for _, line := range strings.Split(string(out), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if i := strings.Index(line, " ["); i > 0 && strings.HasPrefix(line, ":") { // the chain's counters
				line = line[:i]
			}
			got.WriteString(line + "\n")
		}
		if got.String() != c.want {
			t.Errorf("%s reads the tables as\n%s\nwant\n%s", c.cmd, got.String(), c.want)
		}
	}
}
