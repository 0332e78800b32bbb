//go:build linux

package netns

// The pod's rules in legacy xtables (ip_tables and ip6_tables: whole tables replaced with
// setsockopt on a raw socket and read back with getsockopt), for a network stack without nf_tables.
// gVisor's netstack is the one that matters: a pod on gVisor's RuntimeClass has no netlink to
// nf_tables, but its netstack implements the filter and nat tables with the tcp, udp and owner
// matches and the ACCEPT, DROP, RETURN and REDIRECT targets (gVisor's
// pkg/sentry/socket/netfilter), which is all the pod's redirect needs. The kernel structures are
// encoded here by hand, each layout written against linux/netfilter_ipv4/ip_tables.h,
// linux/netfilter_ipv6/ip6_tables.h and linux/netfilter/x_tables.h (golang.org/x/sys defines none
// of them), for 64-bit Linux ABIs (amd64, arm64), where both kernels lay them out alike.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// Socket options (ip_tables.h: IPT_BASE_CTL 64; ip6_tables.h: IP6T_BASE_CTL 64), the same numbers at
// SOL_IP and SOL_IPV6.
const (
	soSetReplace = 64 // IPT_SO_SET_REPLACE, IP6T_SO_SET_REPLACE (setsockopt)
	soGetInfo    = 64 // IPT_SO_GET_INFO, IP6T_SO_GET_INFO (getsockopt)
	soGetEntries = 65 // IPT_SO_GET_ENTRIES, IP6T_SO_GET_ENTRIES (getsockopt)
)

// Sizes of the structures, 64-bit ABI.
const (
	xtTableNameLen = 32 // XT_TABLE_MAXNAMELEN
	xtExtNameLen   = 29 // XT_EXTENSION_MAXNAMELEN: the name field of xt_entry_match and xt_entry_target
	xtExtHeaderLen = 32 // struct xt_entry_match, xt_entry_target: __u16 size; char name[29]; __u8 revision
	xtCountersLen  = 16 // struct xt_counters: __u64 pcnt, bcnt
	xtErrorNameLen = 30 // XT_FUNCTION_MAXNAMELEN: struct xt_error_target's errorname
	// struct ipt_replace / ip6t_replace: char name[32]; unsigned int valid_hooks (32), num_entries
	// (36), size (40), hook_entry[5] (44), underflow[5] (64), num_counters (84); struct xt_counters
	// *counters (88); entries (96).
	xtReplaceLen = 96
	// struct ipt_getinfo: char name[32]; unsigned int valid_hooks (32), hook_entry[5] (36),
	// underflow[5] (56), num_entries (76), size (80).
	xtGetInfoLen = 84
	// struct ipt_get_entries: char name[32]; unsigned int size (32); 4 bytes of padding; entrytable
	// (40), aligned as struct ipt_entry is (its counters are __u64).
	xtGetEntriesLen = 40
)

// Verdicts of the standard target (x_tables.h: a negative verdict is -NF_<verdict> - 1, with
// NF_DROP 0 and NF_ACCEPT 1 from linux/netfilter.h).
const (
	xtDrop   int32 = -0 - 1
	xtAccept int32 = -1 - 1
)

// Flags of the matches (xt_tcpudp.h, xt_owner.h) and of ip6t_ip6 (ip6_tables.h).
const (
	tcpFlagSYN  = 0x02
	tcpFlagACK  = 0x10
	xtOwnerUID  = 0x01 // XT_OWNER_UID
	ip6tFProto  = 0x01 // IP6T_F_PROTO: the protocol field is to be checked
	xtTableNAT  = "nat"
	xtTableFilt = "filter"
)

// xtFamily is what differs between ip_tables and ip6_tables.
type xtFamily struct {
	name     string // for messages
	domain   int    // the raw socket's family
	level    int    // the socket options' level
	entryLen int    // sizeof(struct ipt_entry) 112, sizeof(struct ip6t_entry) 168
	// The offsets inside struct ipt_ip (84 bytes) or struct ip6t_ip6 (136): the addresses and their
	// masks, the interfaces and their masks (IFNAMSIZ each), the protocol (__u16), the flags.
	ipLen, addrLen       int
	dst, dmsk            int
	iniface, inifaceMask int
	proto, flags         int
	// Where, after the ip struct, struct ipt_entry / ip6t_entry keeps nfcache (__u32),
	// target_offset and next_offset (__u16 each), comefrom (__u32) and the counters.
	targetOffset, nextOffset int
	loopback                 netip.Prefix
}

// xtFamilies are IPv4 and IPv6, in the order InstallPodXT programs them.
func xtFamilies() []xtFamily {
	return []xtFamily{
		{name: "IPv4", domain: unix.AF_INET, level: unix.SOL_IP, entryLen: 112,
			ipLen: 84, addrLen: 4, dst: 4, dmsk: 12, iniface: 16, inifaceMask: 48, proto: 80, flags: 82,
			targetOffset: 88, nextOffset: 90, loopback: netip.MustParsePrefix("127.0.0.0/8")},
		// ip6t_ip6: src (0), dst (16), smsk (32), dmsk (48), iniface (64), outiface (80),
		// iniface_mask (96), outiface_mask (112), proto (128), tos (130), flags (131), invflags
		// (132), 3 bytes of padding; ip6t_entry puts 4 more before its counters (152).
		{name: "IPv6", domain: unix.AF_INET6, level: unix.SOL_IPV6, entryLen: 168,
			ipLen: 136, addrLen: 16, dst: 16, dmsk: 48, iniface: 64, inifaceMask: 96, proto: 128, flags: 131,
			targetOffset: 140, nextOffset: 142, loopback: netip.MustParsePrefix("::1/128")},
	}
}

// xtExt is a match or a target as it travels: the extension's name and revision, and its data,
// unpadded (the encoder pads each to 8 bytes, XT_ALIGN).
type xtExt struct {
	name string
	rev  uint8
	data []byte
}

// xtRule is one entry: what it asks of the IP header, its matches, and its target.
type xtRule struct {
	// label names the rule in errors and lets a test leave it out; it is never encoded.
	label   string
	proto   uint8        // 0: any protocol
	dst     netip.Prefix // the zero Prefix: any destination
	inIface string       // "": any interface
	matches []xtExt
	target  xtExt
}

// xtChain is one built-in chain: its hook (NF_INET_*), its rules and its policy (xtAccept or xtDrop),
// the unconditional entry after the rules that the table names as the hook's underflow.
type xtChain struct {
	hook   int
	rules  []xtRule
	policy int32
}

// xtTable is a whole table, its chains in hook order as iptables lays them out.
type xtTable struct {
	name   string
	chains []xtChain
}

// xtFamilyTables is what InstallPodXT writes for one family: filter first (its policy drops), then
// nat, so that a failure part way leaves the family shut rather than half redirected.
type xtFamilyTables struct {
	fam    xtFamily
	tables []xtTable
}

// standard is the standard target (an empty name) with a verdict: struct xt_standard_target,
// the header and an int, 40 bytes once aligned.
func standard(verdict int32) xtExt {
	return xtExt{data: binary.NativeEndian.AppendUint32(nil, uint32(verdict))}
}

// errorTarget is struct xt_error_target: the header named "ERROR" and a name of 30 bytes. iptables
// ends every table with one named "ERROR" (and heads each user chain with one named after it).
func errorTarget(name string) xtExt {
	data := make([]byte, xtErrorNameLen)
	copy(data, name)
	return xtExt{name: "ERROR", data: data}
}

// redirect4 is REDIRECT revision 0 for IPv4: struct nf_nat_ipv4_multi_range_compat, rangesize 1 and
// one struct nf_nat_ipv4_range {flags; __be32 min_ip, max_ip; __be16 min port, max port}, the
// addresses unset (an OUTPUT redirect goes to 127.0.0.1) and the port range the one port.
func redirect4(port uint16) xtExt {
	d := make([]byte, 20)
	binary.NativeEndian.PutUint32(d[0:], 1)
	binary.NativeEndian.PutUint32(d[4:], unix.NF_NAT_RANGE_PROTO_SPECIFIED)
	binary.BigEndian.PutUint16(d[16:], port)
	binary.BigEndian.PutUint16(d[18:], port)
	return xtExt{name: "REDIRECT", data: d}
}

// redirect6 is REDIRECT revision 0 for IPv6: struct nf_nat_range {flags; union nf_inet_addr
// min_addr, max_addr; __be16 min_proto, max_proto}, to ::1 at the one port.
func redirect6(port uint16) xtExt {
	d := make([]byte, 40)
	binary.NativeEndian.PutUint32(d[0:], unix.NF_NAT_RANGE_PROTO_SPECIFIED)
	binary.BigEndian.PutUint16(d[36:], port)
	binary.BigEndian.PutUint16(d[38:], port)
	return xtExt{name: "REDIRECT", data: d}
}

func (f xtFamily) redirect(port uint16) xtExt {
	if f.domain == unix.AF_INET6 {
		return redirect6(port)
	}
	return redirect4(port)
}

// tcpMatch is the tcp match revision 0, struct xt_tcp: __u16 spts[2], dpts[2] (host order, ranges
// inclusive); __u8 option, flg_mask, flg_cmp, invflags. dport 0 means any destination port.
func tcpMatch(dport uint16, flagMask, flagCmp uint8) xtExt {
	d := make([]byte, 12)
	lo, hi := portRange(dport)
	binary.NativeEndian.PutUint16(d[0:], 0)
	binary.NativeEndian.PutUint16(d[2:], 0xffff)
	binary.NativeEndian.PutUint16(d[4:], lo)
	binary.NativeEndian.PutUint16(d[6:], hi)
	d[9], d[10] = flagMask, flagCmp
	return xtExt{name: "tcp", data: d}
}

// udpMatch is the udp match revision 0, struct xt_udp: __u16 spts[2], dpts[2]; __u8 invflags (and a
// byte of padding). A port of 0 means any.
func udpMatch(sport, dport uint16) xtExt {
	d := make([]byte, 10)
	slo, shi := portRange(sport)
	dlo, dhi := portRange(dport)
	binary.NativeEndian.PutUint16(d[0:], slo)
	binary.NativeEndian.PutUint16(d[2:], shi)
	binary.NativeEndian.PutUint16(d[4:], dlo)
	binary.NativeEndian.PutUint16(d[6:], dhi)
	return xtExt{name: "udp", data: d}
}

func portRange(port uint16) (uint16, uint16) {
	if port == 0 {
		return 0, 0xffff
	}
	return port, port
}

// ownerMatch is the owner match revision 1, struct xt_owner_match_info: __u32 uid_min, uid_max,
// gid_min, gid_max; __u8 match, invert (and two bytes of padding): the packet's socket belongs to
// uid. Revision 1, not 0: gVisor tries a match's highest revision first, and would read revision
// 0's struct ipt_owner_info as revision 1's, with no uid flag set: a match of every packet.
func ownerMatch(uid uint32) xtExt {
	d := make([]byte, 20)
	binary.NativeEndian.PutUint32(d[0:], uid)
	binary.NativeEndian.PutUint32(d[4:], uid)
	d[16] = xtOwnerUID
	return xtExt{name: "owner", rev: 1, data: d}
}

// podXTTables is the pod's ruleset (InstallPod's podRuleset) in xtables, for both families. omit, if
// not nil, leaves out the rules (or, for a label ending in "policy", turns the chain's DROP policy
// into ACCEPT) it names: the tests' way of showing that each rule is what its probe depends on.
//
// What nf_tables has and gVisor's xtables lacks changes three things, each closed rather than open:
//   - No conntrack state match. On output nothing needs one: the gateway's sockets, those it
//     accepts included, are exemptUID's (gVisor gives an accepted socket its listener's owner), so
//     its answers to redirected connections leave by the exempt rule, and every other uid's traffic
//     points at loopback after NAT. On input, TCP comes in unless it opens a connection (SYN without
//     ACK), and UDP only from port 53: what comes in so is the answers to the gateway's connections
//     and DNS queries, and the gateway's answers to redirected ones, which gVisor hands in on the
//     pod's interface with the original destination put back as their source. A
//     network.dns.upstream on another port than 53 gets no answer; no UDP from elsewhere reaches
//     any socket of the pod. ICMP comes in for IPv6 only (below): no ICMP errors for IPv4.
//   - No ICMPv6 type or hop limit match: ICMPv6 comes in (neighbour discovery answers: gVisor
//     sends its own solicitations past the hooks), and none leaves but exemptUID's, so gVisor's
//     neighbour advertisements, answers to others' solicitations, are dropped; IPv4's ARP is not IP
//     and passes.
//   - No nfproto-agnostic table: each family has its own tables, written one after another.
func podXTTables(p sandbox.EgressPorts, exemptUID uint32, omit func(label string) bool) []xtFamilyTables {
	if omit == nil {
		omit = func(string) bool { return false }
	}
	keep := func(rules ...xtRule) []xtRule {
		var out []xtRule
		for _, r := range rules {
			if !omit(r.label) {
				out = append(out, r)
			}
		}
		return out
	}
	policy := func(label string) int32 {
		if omit(label) {
			return xtAccept
		}
		return xtDrop
	}
	accept, drop := standard(xtAccept), standard(xtDrop)
	var out []xtFamilyTables
	for _, fam := range xtFamilies() {
		// nat OUTPUT: as the nft pod ruleset's nat-output, rule for rule.
		natOut := keep(
			xtRule{label: "nat exempt", matches: []xtExt{ownerMatch(exemptUID)}, target: accept},
			xtRule{label: "nat dns udp", proto: unix.IPPROTO_UDP, matches: []xtExt{udpMatch(0, dnsPort)}, target: fam.redirect(p.DNS)},
			xtRule{label: "nat dns tcp", proto: unix.IPPROTO_TCP, matches: []xtExt{tcpMatch(dnsPort, 0, 0)}, target: fam.redirect(p.DNS)},
			xtRule{label: "nat loopback", dst: fam.loopback, target: accept},
			xtRule{label: "nat transparent", proto: unix.IPPROTO_TCP, target: fam.redirect(p.Transparent)},
		)
		input := []xtRule{
			{label: "input loopback", inIface: "lo", target: accept},
			{label: "input syn", proto: unix.IPPROTO_TCP, matches: []xtExt{tcpMatch(0, tcpFlagSYN|tcpFlagACK, tcpFlagSYN)}, target: drop},
			{label: "input tcp", proto: unix.IPPROTO_TCP, target: accept},
			{label: "input dns answers", proto: unix.IPPROTO_UDP, matches: []xtExt{udpMatch(dnsPort, 0)}, target: accept},
		}
		if fam.domain == unix.AF_INET6 {
			input = append(input, xtRule{label: "input icmpv6", proto: unix.IPPROTO_ICMPV6, target: accept})
		}
		output := keep(
			xtRule{label: "output exempt", matches: []xtExt{ownerMatch(exemptUID)}, target: accept},
			xtRule{label: "output loopback tcp", proto: unix.IPPROTO_TCP, dst: fam.loopback, target: accept},
			xtRule{label: "output loopback udp", proto: unix.IPPROTO_UDP, dst: fam.loopback, target: accept},
		)
		out = append(out, xtFamilyTables{fam: fam, tables: []xtTable{
			{name: xtTableFilt, chains: []xtChain{
				{hook: unix.NF_INET_LOCAL_IN, rules: keep(input...), policy: policy("input policy")},
				{hook: unix.NF_INET_FORWARD, policy: xtDrop},
				{hook: unix.NF_INET_LOCAL_OUT, rules: output, policy: policy("output policy")},
			}},
			{name: xtTableNAT, chains: []xtChain{
				{hook: unix.NF_INET_PRE_ROUTING, policy: xtAccept},
				{hook: unix.NF_INET_LOCAL_IN, policy: xtAccept},
				{hook: unix.NF_INET_LOCAL_OUT, rules: natOut, policy: xtAccept},
				{hook: unix.NF_INET_POST_ROUTING, policy: xtAccept},
			}},
		}})
	}
	return out
}

// InstallPodXT is InstallPod in legacy xtables, for a pod whose network stack has no nf_tables (a
// pod on gVisor, whose netstack answers netlink to nf_tables with EPROTONOSUPPORT): the same policy
// for every uid but exemptUID (TCP to the transparent listener, DNS to the DNS sockets, the rest
// dropped), written as whole filter and nat tables for IPv4 and IPv6 with IPT_SO_SET_REPLACE and
// IP6T_SO_SET_REPLACE, then read back with the GET_INFO and GET_ENTRIES getsockopts and compared
// entry by entry with what was written. podXTTables says where the stateless tables differ from the
// nft ruleset. Any error means the pod must not go on.
//
// It needs CAP_NET_ADMIN and, for the raw sockets the options travel on, CAP_NET_RAW; gVisor
// strips CAP_NET_RAW from every container unless runsc runs with --net-raw.
func InstallPodXT(ports sandbox.EgressPorts, exemptUID uint32) error {
	if err := ports.Validate(); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	if exemptUID == 0 {
		return errors.New("netns: the pod's rules cannot exempt uid 0")
	}
	if err := installXT(podXTTables(ports, exemptUID, nil)); err != nil {
		return fmt.Errorf("netns: install the pod's xtables rules: %w", err)
	}
	return nil
}

// installXT replaces every table of every family, then reads each back and compares.
func installXT(sets []xtFamilyTables) error {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return fmt.Errorf("the xtables structures are encoded for 64-bit ABIs, not %s", runtime.GOARCH)
	}
	for _, set := range sets {
		if err := installFamily(set); err != nil {
			return fmt.Errorf("%s: %w", set.fam.name, err)
		}
	}
	return nil
}

func installFamily(set xtFamilyTables) error {
	fd, err := unix.Socket(set.fam.domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("raw socket: %w (it takes CAP_NET_RAW, and gVisor keeps that from every container unless runsc runs with --net-raw)", err)
		}
		return fmt.Errorf("raw socket: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	for _, t := range set.tables {
		enc, err := encodeTable(set.fam, t)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name, err)
		}
		old, err := getInfo(fd, set.fam, t.name)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name, err)
		}
		if err := replace(fd, set.fam, enc, old.numEntries); err != nil {
			return fmt.Errorf("table %s: replace: %w", t.name, err)
		}
	}
	for _, t := range set.tables {
		enc, err := encodeTable(set.fam, t)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.name, err)
		}
		if err := verifyTable(fd, set.fam, t, enc); err != nil {
			return fmt.Errorf("table %s: verify: %w", t.name, err)
		}
	}
	return nil
}

// xtEncoded is a table as IPT_SO_SET_REPLACE takes it: the header's fields and the entries.
type xtEncoded struct {
	name       string
	validHooks uint32
	numEntries uint32
	hookEntry  [unix.NF_INET_NUMHOOKS]uint32
	underflow  [unix.NF_INET_NUMHOOKS]uint32
	entries    []byte
	labels     []string // each entry's rule label ("policy", "end" for the ones the encoder adds)
}

// encodeTable lays t out as iptables does: each chain's rules, then its policy entry (the hook's
// underflow), and at the end the ERROR entry.
func encodeTable(fam xtFamily, t xtTable) (*xtEncoded, error) {
	if len(t.name) >= xtTableNameLen {
		return nil, fmt.Errorf("table name %q is too long", t.name)
	}
	enc := &xtEncoded{name: t.name}
	add := func(r xtRule) error {
		b, err := encodeEntry(fam, r)
		if err != nil {
			return fmt.Errorf("rule %q: %w", r.label, err)
		}
		enc.entries = append(enc.entries, b...)
		enc.numEntries++
		enc.labels = append(enc.labels, r.label)
		return nil
	}
	last := -1
	for _, c := range t.chains {
		if c.hook <= last || c.hook >= unix.NF_INET_NUMHOOKS {
			return nil, fmt.Errorf("table %s: chains must be in hook order, each once", t.name)
		}
		last = c.hook
		if c.policy != xtAccept && c.policy != xtDrop {
			return nil, fmt.Errorf("table %s: a policy is ACCEPT or DROP, not %d", t.name, c.policy)
		}
		enc.validHooks |= 1 << c.hook
		enc.hookEntry[c.hook] = uint32(len(enc.entries))
		for _, r := range c.rules {
			if err := add(r); err != nil {
				return nil, err
			}
		}
		enc.underflow[c.hook] = uint32(len(enc.entries))
		if err := add(xtRule{label: "policy", target: standard(c.policy)}); err != nil {
			return nil, err
		}
	}
	if err := add(xtRule{label: "end", target: errorTarget("ERROR")}); err != nil {
		return nil, err
	}
	return enc, nil
}

// align8 is XT_ALIGN on 64-bit ABIs.
func align8(n int) int { return (n + 7) &^ 7 }

// encodeEntry is one struct ipt_entry or ip6t_entry with its matches and target.
func encodeEntry(fam xtFamily, r xtRule) ([]byte, error) {
	e := make([]byte, fam.entryLen)
	if r.dst.IsValid() {
		a := r.dst.Addr()
		if a.BitLen() != fam.addrLen*8 {
			return nil, fmt.Errorf("destination %s is not %s", r.dst, fam.name)
		}
		copy(e[fam.dst:], a.AsSlice())
		mask := make([]byte, fam.addrLen)
		for i := 0; i < r.dst.Bits(); i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		copy(e[fam.dmsk:], mask)
		// The address must already be the prefix's: the kernel compares under the mask, and reads
		// back what was written.
		if r.dst.Masked() != r.dst {
			return nil, fmt.Errorf("destination %s has bits outside its prefix", r.dst)
		}
	}
	if r.inIface != "" {
		if len(r.inIface) >= unix.IFNAMSIZ {
			return nil, fmt.Errorf("interface name %q is too long", r.inIface)
		}
		copy(e[fam.iniface:], r.inIface)
		// iptables' mask for an exact name: its bytes and the terminating NUL.
		for i := 0; i <= len(r.inIface); i++ {
			e[fam.inifaceMask+i] = 0xff
		}
	}
	binary.NativeEndian.PutUint16(e[fam.proto:], uint16(r.proto))
	if r.proto != 0 && fam.domain == unix.AF_INET6 {
		e[fam.flags] = ip6tFProto
	}
	for _, m := range r.matches {
		b, err := encodeExt(m)
		if err != nil {
			return nil, fmt.Errorf("match: %w", err)
		}
		e = append(e, b...)
	}
	targetOffset := len(e)
	t, err := encodeExt(r.target)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	e = append(e, t...)
	if len(e) > 0xffff {
		return nil, fmt.Errorf("entry of %d bytes", len(e))
	}
	binary.NativeEndian.PutUint16(e[fam.targetOffset:], uint16(targetOffset))
	binary.NativeEndian.PutUint16(e[fam.nextOffset:], uint16(len(e)))
	return e, nil
}

// encodeExt is a struct xt_entry_match or xt_entry_target with its data, padded to 8 bytes.
func encodeExt(x xtExt) ([]byte, error) {
	if len(x.name) >= xtExtNameLen {
		return nil, fmt.Errorf("extension name %q is too long", x.name)
	}
	size := align8(xtExtHeaderLen + len(x.data))
	b := make([]byte, size)
	binary.NativeEndian.PutUint16(b[0:], uint16(size))
	copy(b[2:], x.name)
	b[31] = x.rev
	copy(b[xtExtHeaderLen:], x.data)
	return b, nil
}

// xtInfo is what IPT_SO_GET_INFO says of a table.
type xtInfo struct {
	validHooks uint32
	hookEntry  [unix.NF_INET_NUMHOOKS]uint32
	underflow  [unix.NF_INET_NUMHOOKS]uint32
	numEntries uint32
	size       uint32
}

func getInfo(fd int, fam xtFamily, table string) (xtInfo, error) {
	b := make([]byte, xtGetInfoLen)
	copy(b, table)
	if err := getsockopt(fd, fam.level, soGetInfo, b); err != nil {
		return xtInfo{}, fmt.Errorf("getsockopt GET_INFO: %w", err)
	}
	var in xtInfo
	in.validHooks = binary.NativeEndian.Uint32(b[32:])
	for h := range unix.NF_INET_NUMHOOKS {
		in.hookEntry[h] = binary.NativeEndian.Uint32(b[36+4*h:])
		in.underflow[h] = binary.NativeEndian.Uint32(b[56+4*h:])
	}
	in.numEntries = binary.NativeEndian.Uint32(b[76:])
	in.size = binary.NativeEndian.Uint32(b[80:])
	return in, nil
}

func getEntries(fd int, fam xtFamily, table string, size uint32) ([]byte, error) {
	b := make([]byte, xtGetEntriesLen+int(size))
	copy(b, table)
	binary.NativeEndian.PutUint32(b[32:], size)
	if err := getsockopt(fd, fam.level, soGetEntries, b); err != nil {
		return nil, fmt.Errorf("getsockopt GET_ENTRIES: %w", err)
	}
	if got := binary.NativeEndian.Uint32(b[32:]); got != size {
		return nil, fmt.Errorf("GET_ENTRIES returned %d bytes of entries, want %d", got, size)
	}
	return b[xtGetEntriesLen:], nil
}

// replace writes enc with IPT_SO_SET_REPLACE. Linux wants num_counters to be the replaced table's
// entry count and copies the old counters to the buffer the header points at; gVisor ignores both.
func replace(fd int, fam xtFamily, enc *xtEncoded, oldEntries uint32) error {
	counters := make([]byte, xtCountersLen*max(int(oldEntries), 1))
	b := make([]byte, xtReplaceLen+len(enc.entries))
	copy(b, enc.name)
	binary.NativeEndian.PutUint32(b[32:], enc.validHooks)
	binary.NativeEndian.PutUint32(b[36:], enc.numEntries)
	binary.NativeEndian.PutUint32(b[40:], uint32(len(enc.entries)))
	for h := range unix.NF_INET_NUMHOOKS {
		binary.NativeEndian.PutUint32(b[44+4*h:], enc.hookEntry[h])
		binary.NativeEndian.PutUint32(b[64+4*h:], enc.underflow[h])
	}
	binary.NativeEndian.PutUint32(b[84:], oldEntries)
	// The counters' address travels as data: the heap does not move, and counters is kept alive
	// until the call has returned.
	binary.NativeEndian.PutUint64(b[88:], uint64(uintptr(unsafe.Pointer(&counters[0]))))
	copy(b[xtReplaceLen:], enc.entries)
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(fam.level), soSetReplace,
		uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0)
	runtime.KeepAlive(counters)
	runtime.KeepAlive(b)
	if errno != 0 {
		return fmt.Errorf("setsockopt SET_REPLACE: %w", errno)
	}
	return nil
}

// getsockopt is getsockopt(2) with b as the in-out buffer (GET_INFO and GET_ENTRIES read the table's
// name from it). The whole buffer must come back.
func getsockopt(fd, level, opt int, b []byte) error {
	l := uint32(len(b))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
	runtime.KeepAlive(b)
	if errno != 0 {
		return errno
	}
	if int(l) != len(b) {
		return fmt.Errorf("returned %d bytes, want %d", l, len(b))
	}
	return nil
}

// verifyTable reads the table back and requires the hooks, underflows and every entry written.
func verifyTable(fd int, fam xtFamily, t xtTable, enc *xtEncoded) error {
	in, err := getInfo(fd, fam, t.name)
	if err != nil {
		return err
	}
	blob, err := getEntries(fd, fam, t.name, in.size)
	if err != nil {
		return err
	}
	return compareTable(fam, enc, in, blob)
}

// compareTable compares what the kernel says of a table (its info and entries) with enc.
func compareTable(fam xtFamily, enc *xtEncoded, in xtInfo, blob []byte) error {
	if in.validHooks != enc.validHooks {
		return fmt.Errorf("valid hooks %#x, want %#x", in.validHooks, enc.validHooks)
	}
	if in.numEntries != enc.numEntries || int(in.size) != len(enc.entries) {
		return fmt.Errorf("%d entries in %d bytes, want %d in %d", in.numEntries, in.size, enc.numEntries, len(enc.entries))
	}
	// Only the valid hooks' offsets mean anything (Linux reports the others as 0xffffffff).
	for h := range unix.NF_INET_NUMHOOKS {
		if enc.validHooks&(1<<h) == 0 {
			continue
		}
		if in.hookEntry[h] != enc.hookEntry[h] || in.underflow[h] != enc.underflow[h] {
			return fmt.Errorf("hook %d enters at %d and underflows at %d, want %d and %d",
				h, in.hookEntry[h], in.underflow[h], enc.hookEntry[h], enc.underflow[h])
		}
	}
	got, err := decodeEntries(fam, blob)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	want, err := decodeEntries(fam, enc.entries)
	if err != nil {
		return fmt.Errorf("what was written: %w", err)
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d entries read back, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].equal(want[i]) {
			return fmt.Errorf("entry %d (%s) reads back as %s, want %s", i, enc.labels[i], got[i], want[i])
		}
	}
	return nil
}

// xtEntryView is an entry as read: the raw ip struct, the matches and the target. The counters,
// nfcache and comefrom are the kernel's own (Linux keeps its hook bookkeeping in comefrom) and are
// not part of it.
type xtEntryView struct {
	offset  int
	ip      []byte
	matches []xtExtView
	target  xtExtView
}

// xtExtView is an extension as read: its name, revision and data (with the padding its size
// includes).
type xtExtView struct {
	name string
	rev  uint8
	data []byte
}

// equal compares two entries. A match's revision is left out: gVisor reports every match it
// returns as revision 0, the owner match written as revision 1 included. What a match means is in
// its name and data, and the owner match's two revisions differ in both size and layout, so equal
// data means the revision written.
func (e xtEntryView) equal(o xtEntryView) bool {
	if e.offset != o.offset || !bytes.Equal(e.ip, o.ip) || len(e.matches) != len(o.matches) {
		return false
	}
	for i := range e.matches {
		if e.matches[i].name != o.matches[i].name || !bytes.Equal(e.matches[i].data, o.matches[i].data) {
			return false
		}
	}
	return e.target.name == o.target.name && e.target.rev == o.target.rev && bytes.Equal(e.target.data, o.target.data)
}

func (e xtEntryView) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "[at %d ip %x", e.offset, e.ip)
	for _, m := range e.matches {
		fmt.Fprintf(&s, " %s/%d %x", m.name, m.rev, m.data)
	}
	fmt.Fprintf(&s, " -> %q/%d %x]", e.target.name, e.target.rev, e.target.data)
	return s.String()
}

// decodeEntries splits a table's entries, checking every offset against the bounds it must keep.
func decodeEntries(fam xtFamily, b []byte) ([]xtEntryView, error) {
	var out []xtEntryView
	for off := 0; off < len(b); {
		if len(b)-off < fam.entryLen {
			return nil, fmt.Errorf("entry at %d: %d bytes left, an entry takes %d", off, len(b)-off, fam.entryLen)
		}
		e := b[off:]
		to := int(binary.NativeEndian.Uint16(e[fam.targetOffset:]))
		next := int(binary.NativeEndian.Uint16(e[fam.nextOffset:]))
		if to < fam.entryLen || to+xtExtHeaderLen > next || next > len(e) || next%8 != 0 {
			return nil, fmt.Errorf("entry at %d: target offset %d, next offset %d", off, to, next)
		}
		v := xtEntryView{offset: off, ip: e[:fam.ipLen]}
		for m := fam.entryLen; m < to; {
			x, size, err := decodeExt(e[m:to])
			if err != nil {
				return nil, fmt.Errorf("entry at %d, match at %d: %w", off, m, err)
			}
			v.matches = append(v.matches, x)
			m += size
		}
		t, size, err := decodeExt(e[to:next])
		if err != nil {
			return nil, fmt.Errorf("entry at %d, target: %w", off, err)
		}
		if size != next-to {
			return nil, fmt.Errorf("entry at %d: target of %d bytes in %d", off, size, next-to)
		}
		v.target = t
		out = append(out, v)
		off += next
	}
	return out, nil
}

// decodeExt reads one xt_entry_match or xt_entry_target from the front of b and returns its size.
func decodeExt(b []byte) (xtExtView, int, error) {
	if len(b) < xtExtHeaderLen {
		return xtExtView{}, 0, fmt.Errorf("%d bytes, a header takes %d", len(b), xtExtHeaderLen)
	}
	size := int(binary.NativeEndian.Uint16(b))
	if size < xtExtHeaderLen || size > len(b) || size%8 != 0 {
		return xtExtView{}, 0, fmt.Errorf("size %d in %d bytes", size, len(b))
	}
	name := b[2 : 2+xtExtNameLen]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return xtExtView{name: string(name), rev: b[31], data: b[xtExtHeaderLen:size]}, size, nil
}
