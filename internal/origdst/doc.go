// Package origdst reads where a connection redirected by nftables was going before the redirect
// (SO_ORIGINAL_DST from connection tracking). It is a leaf shared by the gateway, which serves the
// transparent listener whichever backend made it, and the tests of the rules that redirect to it.
package origdst
