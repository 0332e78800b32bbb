//go:build linux

package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// TableName is the nftables table (family inet) that Install owns in the sandbox's namespace; it is
// exported so that diagnostics (`cordon doctor`, a test) can name it.
const TableName = "cordon"

// Chain names inside TableName.
const (
	chainNATOutput    = "nat-output"
	chainFilterOutput = "filter-output"
	chainFilterInput  = "filter-input"
	chainForward      = "filter-forward"
)

// ErrNoNFTables says that the network stack has no nf_tables at all: netlink to it is refused as
// an unknown protocol (EPROTONOSUPPORT) or family (EAFNOSUPPORT), as gVisor's netstack refuses it.
// It is the one error after which a pod's setup may install InstallPodXT's tables instead: any
// other failure of the nft path is a failure.
var ErrNoNFTables = errors.New("the network stack has no nf_tables")

// dnsPort is where DNS goes, whatever the address: the sandbox may have its own idea of a resolver.
const dnsPort = 53

// Install programs the sandbox's network namespace at nsPath so that the gateway sees all of its
// traffic: nftables (family inet, table "cordon", written over netlink in one atomic batch) redirects
// every TCP connection to ports.Transparent and every DNS query (UDP or TCP to port 53) to ports.DNS,
// and drops everything else that leaves a socket: other UDP, ICMP, raw IP, either family. It then reads
// the ruleset back and compares it with what it wrote, and only then adds default routes through
// loopback (without a route, connect() to an outside address fails before nftables ever sees it).
//
// Install replaces the table each time, so calling it again is harmless. Any error means the namespace
// must be considered unprotected: the caller must not start the agent.
func Install(nsPath string, ports sandbox.EgressPorts) error {
	if err := ports.Validate(); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	nsFD, err := openNetNS(nsPath)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(nsFD) }()

	release, err := install(nsFD, nsPath, ports)
	go release()
	return err
}

// InstallHere is Install for the calling process's own network namespace, for the sandbox's init,
// which holds CAP_NET_ADMIN there but runs before its /proc matches its pid namespace (so the
// setns-based path, which names threads through /proc, cannot work).
//
// It returns release, never nil, which closes the netlink socket the rules were written over; the
// caller must call it, on error too. Closing the socket waits in the kernel (nft_rcv_nl_event flushes
// nf_tables' deferred destruction of the transaction, which waits for an RCU grace period: 1-7 ms on
// this kind of machine) in a state where the thread takes no signal; init calls it in the background,
// after syscall.AllThreadsSyscall has dropped its threads' capabilities (that call signals every
// thread, and one waiting there held it up by milliseconds). Until then the socket is close-on-exec
// and the caller's alone; it keeps the right to change the rules that its opener had, so it must not
// stay open for the run.
func InstallHere(ports sandbox.EgressPorts) (release func(), err error) {
	if err := ports.Validate(); err != nil {
		return func() {}, fmt.Errorf("netns: %w", err)
	}
	return install(-1, "this namespace", ports)
}

// InstallPod programs the calling process's network namespace, a Kubernetes pod's, for the pod's
// gateway sidecar, which runs as exemptUID: every other uid's TCP connections and DNS queries go to
// the gateway's ports as Install sends the sandbox's, and everything else they send is dropped;
// exemptUID's connections go where they are addressed (the gateway dials upstreams, and asks the
// cluster's resolver, itself). Nothing comes in but answers and loopback, and nothing is forwarded.
// Unlike Install it adds no routes: the pod has its own interface and routes, which the gateway's
// connections need.
//
// The ruleset is written in one batch and read back as Install's is; any error means the pod must
// not go on, except that one wrapping ErrNoNFTables (a network stack without nf_tables, such as
// gVisor's) lets the caller install InstallPodXT's tables instead. exemptUID 0 is refused: root is the setup step's own identity, and no other container
// may share what the gateway is allowed.
func InstallPod(ports sandbox.EgressPorts, exemptUID uint32) error {
	if err := ports.Validate(); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	if exemptUID == 0 {
		return errors.New("netns: the pod's rules cannot exempt uid 0")
	}
	release, err := installRules(-1, podRuleset(ports, exemptUID))
	go release()
	if err != nil {
		return fmt.Errorf("netns: install the pod's rules: %w", err)
	}
	return nil
}

// install does the work in the namespace nsFD, or in the current one when nsFD is -1; release is
// installRules'.
func install(nsFD int, name string, ports sandbox.EgressPorts) (release func(), err error) {
	release, err = installRules(nsFD, ruleset(ports))
	if err != nil {
		return release, fmt.Errorf("netns: install rules in %s: %w", name, err)
	}
	if err := routeThroughLoopback(nsFD); err != nil {
		return release, fmt.Errorf("netns: routes in %s: %w", name, err)
	}
	return release, nil
}

// installRules writes rs in one batch and verifies it.
//
// It returns release, never nil, which closes the netlink socket; the callers run it in the
// background (InstallHere says when), since the close waits for an RCU grace period, 1-7 ms on this
// kind of machine, on the path that starts the sandbox's command, for nothing the rules depend on.
func installRules(nsFD int, rs wantRuleset) (release func(), err error) {
	release = func() {}
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if nsFD >= 0 {
		opts = append(opts, nftables.WithNetNSFd(nsFD))
	}
	conn, err := nftables.New(opts...)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			return release, fmt.Errorf("%w: netlink to nf_tables: %w", ErrNoNFTables, err)
		}
		return release, fmt.Errorf("netlink to nf_tables: %w", err)
	}
	release = func() { _ = conn.CloseLasting() }

	// Add, delete, add: the table exists after the first message whether or not it existed before, so
	// the delete cannot fail, and the whole replacement commits as one transaction or not at all.
	conn.AddTable(rs.table)
	conn.DelTable(rs.table)
	conn.AddTable(rs.table)
	for _, c := range rs.chains {
		conn.AddChain(c.chain)
		for _, exprs := range c.rules {
			conn.AddRule(&nftables.Rule{Table: rs.table, Chain: c.chain, Exprs: exprs})
		}
	}
	if err := conn.Flush(); err != nil {
		return release, fmt.Errorf("commit: %w", err)
	}
	if err := verifyRules(conn, rs); err != nil {
		return release, fmt.Errorf("verify: %w", err)
	}
	return release, nil
}

// wantRuleset is the table Install writes, as data, so that the verification compares against the
// same thing that was written.
type wantRuleset struct {
	table  *nftables.Table
	chains []wantChain
}

type wantChain struct {
	chain *nftables.Chain
	rules [][]expr.Any
}

// ruleset is the sandbox's table (Install).
func ruleset(p sandbox.EgressPorts) wantRuleset { return buildRuleset(p, nil) }

// podRuleset is a pod's table (InstallPod): the sandbox's, with exemptUID's traffic let through
// first, and answers let in (the sandbox has loopback only, so its input chain needs no such rule).
func podRuleset(p sandbox.EgressPorts, exemptUID uint32) wantRuleset {
	return buildRuleset(p, &exemptUID)
}

// buildRuleset is the one builder of both tables; exempt is nil for the sandbox's.
func buildRuleset(p sandbox.EgressPorts, exempt *uint32) wantRuleset {
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	accept, drop := nftables.ChainPolicyAccept, nftables.ChainPolicyDrop

	// nat output: decide where each new connection really goes. Replies never pass NAT chains.
	// The exempt uid (a pod's gateway) goes first and is left alone: its connections and its own DNS
	// queries go where they are addressed.
	// Loopback stays loopback: it only reaches sockets of the sandbox's own namespace (the agent's test
	// servers, and the gateway's own listeners, the explicit proxy above all), so it is no way out. A
	// direct connection to the transparent port shows itself to the gateway as such and is refused.
	// DNS comes first: any resolver address, loopback ones such as 127.0.0.53 included, is the gateway.
	var nat [][]expr.Any
	if exempt != nil {
		nat = append(nat, cat(skuid(*exempt), verdict(expr.VerdictAccept)))
	}
	nat = append(nat,
		cat(l4(unix.IPPROTO_UDP), dport(dnsPort), redirect(p.DNS)),
		cat(l4(unix.IPPROTO_TCP), dport(dnsPort), redirect(p.DNS)),
	)
	for _, fam := range families() {
		nat = append(nat, cat(fam.loopback(), verdict(expr.VerdictAccept)))
	}
	nat = append(nat, cat(l4(unix.IPPROTO_TCP), redirect(p.Transparent)))

	// filter output: after NAT, the only new traffic allowed is TCP and UDP on loopback (where every
	// redirected connection now points), and, in a pod, whatever the exempt uid sends. ICMP and raw
	// IP stay dropped, even on loopback.
	var filter [][]expr.Any
	if exempt != nil {
		filter = append(filter, cat(skuid(*exempt), verdict(expr.VerdictAccept)))
	}
	// The sandbox's routes all lead to lo, so its rule also names the interface. A pod's redirected
	// packets keep the interface their first route chose (eth0) in the hook's view: the hook sees the
	// device as it was before NAT rerouted them, so there the destination alone says loopback (which
	// no route sends anywhere else).
	filter = append(filter, ctEstablished())
	for _, fam := range families() {
		for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			var oif []expr.Any
			if exempt == nil {
				oif = oifLoopback()
			}
			filter = append(filter, cat(oif, fam.loopback(), l4(proto), verdict(expr.VerdictAccept)))
		}
	}
	// filter input: loopback, and in a pod the answers to what the rules let out (the gateway's
	// upstream connections); nothing from outside starts a connection.
	input := [][]expr.Any{cat(iifLoopback(), verdict(expr.VerdictAccept))}
	if exempt != nil {
		input = append(input, ctEstablished())
	}
	// A pod's IPv6 needs neighbour discovery: the kernel's own solicitations and advertisements
	// belong to no uid's socket, and without them the gateway's IPv6 connections find no next hop
	// (EHOSTUNREACH). Only the ND messages of each direction pass, and only with the hop limit 255
	// that RFC 4861 makes receivers demand. Nothing in the pod but root can send ICMPv6 of these
	// types (it takes a raw socket, so CAP_NET_RAW, and ping sockets send echo requests only), and
	// no container of the pod but the setup step, which installs this and exits, is root.
	if exempt != nil {
		for _, typ := range []byte{ndRouterSolicit, ndNeighborSolicit, ndNeighborAdvert} {
			filter = append(filter, cat(neighborDiscovery(typ), verdict(expr.VerdictAccept)))
		}
		for _, typ := range []byte{ndRouterAdvert, ndNeighborSolicit, ndNeighborAdvert} {
			input = append(input, cat(neighborDiscovery(typ), verdict(expr.VerdictAccept)))
		}
	}

	return wantRuleset{table: table, chains: []wantChain{
		{chain: &nftables.Chain{Name: chainNATOutput, Table: table, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest, Policy: &accept}, rules: nat},
		{chain: &nftables.Chain{Name: chainFilterOutput, Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop}, rules: filter},
		{chain: &nftables.Chain{Name: chainFilterInput, Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop},
			rules: input},
		// Nothing is ever forwarded: the sandbox has no other interface (and if one appears it stays
		// shut), and a pod routes nothing for anyone.
		{chain: &nftables.Chain{Name: chainForward, Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop}},
	}}
}

// verifyRules reads the table back from the kernel and requires every chain to have the hook, type,
// priority, policy and exact rules that were written, so that a partial or altered install is an error.
func verifyRules(conn *nftables.Conn, want wantRuleset) error {
	chains, err := conn.ListChainsOfTableFamily(want.table.Family)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	got := map[string]*nftables.Chain{}
	for _, c := range chains {
		if c.Table != nil && c.Table.Name == want.table.Name {
			got[c.Name] = c
		}
	}
	if len(got) != len(want.chains) {
		return fmt.Errorf("table %s has %d chains, want %d", want.table.Name, len(got), len(want.chains))
	}
	for _, w := range want.chains {
		g := got[w.chain.Name]
		switch {
		case g == nil:
			return fmt.Errorf("chain %s missing", w.chain.Name)
		case g.Type != w.chain.Type:
			return fmt.Errorf("chain %s has type %q, want %q", w.chain.Name, g.Type, w.chain.Type)
		case g.Hooknum == nil || *g.Hooknum != *w.chain.Hooknum:
			return fmt.Errorf("chain %s is on the wrong hook", w.chain.Name)
		case g.Priority == nil || *g.Priority != *w.chain.Priority:
			return fmt.Errorf("chain %s has the wrong priority", w.chain.Name)
		case g.Policy == nil || *g.Policy != *w.chain.Policy:
			return fmt.Errorf("chain %s has the wrong policy", w.chain.Name)
		}
		rules, err := conn.GetRules(want.table, w.chain)
		if err != nil {
			return fmt.Errorf("list rules of %s: %w", w.chain.Name, err)
		}
		if len(rules) != len(w.rules) {
			return fmt.Errorf("chain %s has %d rules, want %d", w.chain.Name, len(rules), len(w.rules))
		}
		for i, r := range rules {
			if !reflect.DeepEqual(r.Exprs, w.rules[i]) {
				return fmt.Errorf("chain %s rule %d reads back as %v, want %v", w.chain.Name, i, describe(r.Exprs), describe(w.rules[i]))
			}
		}
	}
	return nil
}

// describe prints expressions for an error message.
func describe(exprs []expr.Any) string {
	s := "["
	for i, e := range exprs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%T%+v", e, e)
	}
	return s + "]"
}

// family matches one IP version's loopback destinations.
type family struct {
	nfproto byte
	offset  uint32 // of the destination address in the network header
	prefix  []byte // the loopback prefix: 127/8, or all of ::1
}

// families lists IPv4 and IPv6 (a function, so that no rule data is shared mutable state).
func families() []family {
	return []family{
		{unix.NFPROTO_IPV4, 16, []byte{127}},
		{unix.NFPROTO_IPV6, 24, []byte{15: 1}},
	}
}

// loopback is "meta nfproto ipvN ip daddr 127.0.0.0/8" or "... ip6 daddr ::1".
func (f family) loopback() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f.nfproto}},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.offset, Len: uint32(len(f.prefix))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: f.prefix},
	}
}

// l4 is "meta l4proto <proto>", which sees past IPv6 extension headers.
func l4(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// dport is "th dport <port>"; only valid after l4 has matched TCP or UDP.
func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// redirect is "redirect to :<port>": the destination becomes the loopback address of the packet's
// family (127.0.0.1 or ::1) and port, and conntrack remembers the original, which the gateway reads
// with SO_ORIGINAL_DST.
func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

// ctEstablished is "ct state established,related accept": replies to connections the rules let
// through (the gateway's side of them included), and ICMP errors about them.
func ctEstablished() []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

// skuid is "meta skuid <uid>": the packet's socket belongs to uid. A packet without a socket (one
// the kernel makes itself, a forwarded one) does not match.
func skuid(uid uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(uid)},
	}
}

// ICMPv6 neighbour discovery message types (RFC 4861).
const (
	ndRouterSolicit   = 133
	ndRouterAdvert    = 134
	ndNeighborSolicit = 135
	ndNeighborAdvert  = 136
)

// neighborDiscovery is "meta nfproto ipv6 meta l4proto ipv6-icmp icmpv6 type <typ> ip6 hoplimit 255".
func neighborDiscovery(typ byte) []expr.Any {
	return cat(
		[]expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		},
		l4(unix.IPPROTO_ICMPV6),
		[]expr.Any{
			&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}},
			&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 7, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{255}},
		},
	)
}

// oifLoopback and iifLoopback are "meta oifname/iifname lo".
func oifLoopback() []expr.Any { return ifname(expr.MetaKeyOIFNAME) }
func iifLoopback() []expr.Any { return ifname(expr.MetaKeyIIFNAME) }

func ifname(key expr.MetaKey) []expr.Any {
	name := make([]byte, unix.IFNAMSIZ)
	copy(name, "lo")
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
