// Package netns is the kernel side of cordon's egress gateway in the native sandbox: it wires the
// gateway into the sandbox's network namespace without giving that namespace any route out. It
// creates the gateway's listening sockets inside the namespace (a socket keeps the namespace it was
// created in, so the gateway can serve them from outside, and no veth or host interface is ever
// visible to the agent), and it programs nftables there over netlink so that every TCP connection
// lands on the transparent listener, every DNS query on the DNS sockets, and everything else is
// dropped. The agent has no CAP_NET_ADMIN, so it cannot undo either.
//
// The sandbox's init uses it to make the sockets (ListenersHere) and rules (InstallHere) from inside
// (sandbox/linux); the ports are sandbox.EgressPorts and the sockets travel as sandbox.Listeners, so
// that the gateway, which serves them and reads each redirected connection's original destination
// itself, imports none of this.
//
// A Kubernetes pod gets a variant (InstallPod, ListenersHere): the setup step installs the same
// redirect in the pod's own namespace, exempting the uid of the gateway sidecar, which listens on the
// pod's loopback itself and dials upstreams through the pod's interface; no routes are added. A pod
// whose network stack has no nf_tables (gVisor's netstack: InstallPod's error wraps ErrNoNFTables)
// gets the same policy in legacy xtables instead (InstallPodXT), written and read back with the
// ip_tables socket options.
//
// Everything here fails closed: a namespace path that is not a network namespace, a ruleset that does
// not read back as written, or a thread that cannot return to its own namespace is an error, and the
// caller must not start the agent.
package netns
