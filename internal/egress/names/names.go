// Package names hands out the private addresses the sandbox's DNS answers with, one per host name, and
// maps them back. Because every name gets its own address for the whole run, the gateway knows which
// name a connection is for from its destination alone, even for protocols that never say (git over
// ssh, a database protocol), and an address the sandbox made up maps to no name at all.
//
// IPv4 addresses come from 198.18.0.0/15 (RFC 2544's benchmarking range, never routed on the
// internet, so an address cannot be confused with a real host) and IPv6 addresses from a unique local
// /64 (RFC 4193) picked at random per run, so addresses from one run mean nothing in another.
package names

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/hostname"
)

// DefaultV4 returns the IPv4 range New assigns from. It is a function so no caller can change it.
func DefaultV4() netip.Prefix { return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 0, 0}), 15) }

// ErrExhausted is returned by Assign when every address of the range is taken. The run's DNS then
// fails the query rather than reuse an address, which would make a connection's name ambiguous.
var ErrExhausted = errors.New("no free address left in the range")

// Mapper assigns addresses to names sequentially and looks them up both ways. It implements
// egress.Names and is safe for concurrent use.
type Mapper struct {
	v4, v6 netip.Prefix
	// limit is how many names fit: the smaller of the two ranges, less the first and last addresses.
	limit int

	mu     sync.RWMutex
	byName map[string]int
	names  []string // names[i] holds the addresses at offset i+1 in each range
}

// New returns a Mapper over DefaultV4() and a fresh random unique local IPv6 /64.
func New() (*Mapper, error) {
	var b [16]byte
	b[0] = 0xfd // fd00::/8: locally assigned ULA
	// 40-bit global ID and 16-bit subnet ID, random (RFC 4193 section 3.2).
	if _, err := rand.Read(b[1:8]); err != nil {
		return nil, fmt.Errorf("picking a random IPv6 prefix: %w", err)
	}
	return NewRanges(DefaultV4(), netip.PrefixFrom(netip.AddrFrom16(b), 64))
}

// NewRanges returns a Mapper over the given ranges; v6 may be the zero Prefix for IPv4 only. It
// exists for tests and for hosts where the default range is already in use.
func NewRanges(v4, v6 netip.Prefix) (*Mapper, error) {
	if !v4.IsValid() || !v4.Addr().Is4() {
		return nil, fmt.Errorf("IPv4 range %v: not an IPv4 prefix", v4)
	}
	v4 = v4.Masked()
	limit := hostCount(32 - v4.Bits())
	if v6.IsValid() {
		if !v6.Addr().Is6() || v6.Addr().Is4In6() {
			return nil, fmt.Errorf("IPv6 range %v: not an IPv6 prefix", v6)
		}
		if v6.Bits() < 64 {
			return nil, fmt.Errorf("IPv6 range %v: must be a /64 or longer", v6)
		}
		v6 = v6.Masked()
		limit = min(limit, hostCount(128-v6.Bits()))
	} else if v6 != (netip.Prefix{}) {
		return nil, fmt.Errorf("IPv6 range %v: invalid prefix", v6)
	}
	if limit < 1 {
		return nil, fmt.Errorf("ranges %v and %v leave no address to assign", v4, v6)
	}
	return &Mapper{v4: v4, v6: v6, limit: limit, byName: map[string]int{}}, nil
}

// hostCount is how many addresses a range with hostBits free bits offers once the first (the network's
// own address) and last (broadcast in IPv4) are left out, capped at what an int index can hold.
func hostCount(hostBits int) int {
	if hostBits >= 62 {
		return math.MaxInt32 // far beyond any run; keeps the index arithmetic small
	}
	return max(0, (1<<hostBits)-2)
}

// Ranges returns the prefixes the Mapper assigns from (v6 is the zero Prefix when there is none), so
// the sandbox's firewall can send exactly these to the gateway.
func (m *Mapper) Ranges() (v4, v6 netip.Prefix) { return m.v4, m.v6 }

// Assign returns the name's addresses, assigning the next free ones on first use. The name is
// compared lower-case (ASCII only) without a trailing dot, so a resolver's 0x20 case randomization
// cannot use up the range or give one host two names. v6 is invalid when the Mapper has no IPv6 range.
func (m *Mapper) Assign(name string) (v4, v6 netip.Addr, err error) {
	n, err := canonical(name)
	if err != nil {
		return v4, v6, err
	}
	m.mu.RLock()
	i, ok := m.byName[n]
	m.mu.RUnlock()
	if !ok {
		m.mu.Lock()
		i, ok = m.byName[n]
		if !ok {
			if len(m.names) >= m.limit {
				m.mu.Unlock()
				return v4, v6, fmt.Errorf("assigning an address to %q: %w (%d names)", n, ErrExhausted, m.limit)
			}
			i = len(m.names)
			m.names = append(m.names, n)
			m.byName[n] = i
		}
		m.mu.Unlock()
	}
	v4 = addOffset(m.v4.Addr(), uint64(i)+1)
	if m.v6.IsValid() {
		v6 = addOffset(m.v6.Addr(), uint64(i)+1)
	}
	return v4, v6, nil
}

// Lookup returns the name addr was assigned to. An IPv4-mapped IPv6 address (a connection through a
// dual-stack socket) counts as its IPv4 address; a zone is ignored.
func (m *Mapper) Lookup(addr netip.Addr) (name string, ok bool) {
	addr = addr.Unmap().WithZone("")
	var p netip.Prefix
	switch {
	case m.v4.Contains(addr):
		p = m.v4
	case m.v6.IsValid() && m.v6.Contains(addr):
		p = m.v6
	default:
		return "", false
	}
	off, ok := offset(p.Addr(), addr)
	if !ok || off == 0 {
		return "", false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if off > uint64(len(m.names)) {
		return "", false
	}
	return m.names[off-1], true
}

// Len returns how many names have been assigned.
func (m *Mapper) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.names)
}

// addOffset returns base + off in the low 64 bits (ranges are at least /64, so no carry crosses them).
func addOffset(base netip.Addr, off uint64) netip.Addr {
	if base.Is4() {
		b := base.As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		v += uint32(off)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	b := base.As16()
	var lo uint64
	for _, c := range b[8:] {
		lo = lo<<8 | uint64(c)
	}
	lo += off
	for i := 15; i >= 8; i-- {
		b[i] = byte(lo)
		lo >>= 8
	}
	return netip.AddrFrom16(b)
}

// offset returns addr - base for an addr known to lie in base's range, if it fits the index.
func offset(base, addr netip.Addr) (uint64, bool) {
	if base.Is4() {
		b, a := base.As4(), addr.As4()
		bv := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		av := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		return uint64(av - bv), true
	}
	b, a := base.As16(), addr.As16()
	if [8]byte(b[:8]) != [8]byte(a[:8]) {
		return 0, false
	}
	var bv, av uint64
	for i := 8; i < 16; i++ {
		bv, av = bv<<8|uint64(b[i]), av<<8|uint64(a[i])
	}
	return av - bv, true
}

// canonical returns name lower-case without a trailing dot, refusing what is not a plain host name:
// an address must never stand for a string the gateway could not dial or the policy could not match.
func canonical(name string) (string, error) { return hostname.Normalize(name) }
