package kernelrelay

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// peerValue is the value of the peers map: the socket cookie of the socket a socket's bytes go to,
// and how many bytes the verdict program redirected there (the audit's count).
type peerValue struct {
	Peer  uint64
	Bytes uint64
}

// verdict builds the sk_skb verdict program. For a socket with an entry in peers it adds the skb's
// length to the entry's byte count and redirects the skb to the send side of the peer socket in
// targets; a socket without an entry keeps its bytes (SK_PASS: user space reads them); a segment
// without bytes is dropped.
func verdict(targets, peers *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // r6 = skb
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord), // key = cookie
		asm.LoadMapPtr(asm.R1, peers.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R1, asm.R6, 0, asm.Word), // skb->len
		// A segment without bytes (the FIN's) has nothing to relay; redirected, the kernel would try
		// to send it after the gateway shut the peer's write side, and fail the peer with EPIPE.
		asm.JEq.Imm(asm.R1, 0, "drop"),
		asm.AddAtomic.Mem(asm.R7, asm.R1, asm.DWord, 8),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, targets.FD()),
		asm.Mov.Reg(asm.R3, asm.R7), // key = &value.Peer
		asm.Mov.Imm(asm.R4, 0),      // to the peer's egress
		asm.FnSkRedirectHash.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"), // SK_PASS
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("drop"), // SK_DROP
		asm.Return(),
	}
}

// load creates the maps and the program (attached by the caller). targets and sources are socket
// hashes keyed by socket cookie: the program is attached to sources and redirects into targets.
func load(maxEntries uint32) (targets, sources, peers *ebpf.Map, prog *ebpf.Program, err error) {
	sockhash := func(name string) (*ebpf.Map, error) {
		return ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.SockHash, KeySize: 8, ValueSize: 8, MaxEntries: maxEntries})
	}
	fail := func(what string, err error) (*ebpf.Map, *ebpf.Map, *ebpf.Map, *ebpf.Program, error) {
		for _, m := range []*ebpf.Map{targets, sources, peers} {
			if m != nil {
				m.Close()
			}
		}
		return nil, nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if targets, err = sockhash("cordon_targets"); err != nil {
		return fail("socket hash", err)
	}
	if sources, err = sockhash("cordon_sources"); err != nil {
		return fail("socket hash", err)
	}
	// Entries allocated as sockets are handed over, not all up front (a preallocated map of this size
	// would pin several MiB of kernel memory for each gateway).
	if peers, err = ebpf.NewMap(&ebpf.MapSpec{Name: "cordon_peers", Type: ebpf.Hash, KeySize: 8, ValueSize: 16, MaxEntries: maxEntries, Flags: unix.BPF_F_NO_PREALLOC}); err != nil {
		return fail("peer map", err)
	}
	prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "cordon_relay",
		Type:         ebpf.SkSKB,
		AttachType:   ebpf.AttachSkSKBVerdict,
		Instructions: verdict(targets, peers),
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		return fail("verdict program", err)
	}
	return targets, sources, peers, prog, nil
}
