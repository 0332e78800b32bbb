// Package kernelrelay hands the byte relay of a connection the gateway has judged, and does not
// intercept, to the kernel: an eBPF sockmap whose sk_skb verdict program redirects every segment that
// arrives on one socket to the send side of its peer, so the bytes never cross into user space.
//
// The gateway keeps what the audit and the client need: exact byte counts (the verdict program adds
// every segment it redirects to a per-socket counter, read from a BPF map), and end-of-stream order
// (a FIN in one direction is passed on only after every byte before it is in the peer's send queue,
// checked against the peer's TCP sequence numbers, while the other direction keeps flowing; a reset on
// either side resets both). Where the kernel or privileges do not allow a sockmap (rootless, no BPF),
// New says why and the gateway keeps its user-space relay.
//
// The programs are written with cilium/ebpf's asm package, so there is no C, no clang and no object
// file: the binary stays one static, pure-Go file.
package kernelrelay
