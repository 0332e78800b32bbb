// Package sni reads the TLS ClientHello that a client sends first on a connection, so that cordon's
// egress gateway can learn which name a TLS connection is for (the server_name extension) before it
// decides, dials and then replays the very same bytes upstream. Nothing is taken from the connection
// for good: Peek returns every byte it read.
//
// The gateway must never relay a connection whose name it could not check, so the parser is strict
// where clients and servers are lenient: a malformed, truncated, oversized or ambiguous ClientHello
// (two server names, a repeated extension, trailing bytes) is an error, never a best guess that a
// server might read differently.
package sni

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/hostname"
)

// Errors that Peek wraps, so that callers can tell "this is not TLS at all" (relay it as some other
// protocol) from "this is TLS that cannot be trusted" (refuse it).
var (
	// ErrNotTLS means the first byte is not a TLS handshake record: the connection speaks something
	// else.
	ErrNotTLS = errors.New("sni: not a TLS handshake")
	// ErrMalformed means the bytes start like TLS but are not a well-formed ClientHello.
	ErrMalformed = errors.New("sni: malformed ClientHello")
	// ErrTooLarge means the ClientHello would exceed the caller's limit.
	ErrTooLarge = errors.New("sni: ClientHello exceeds the size limit")
)

// TLS wire constants (RFC 8446, RFC 6066, RFC 7301, draft-ietf-tls-esni).
const (
	recordTypeHandshake     = 0x16
	recordHeaderLen         = 5
	maxPlaintextRecord      = 1 << 14
	handshakeTypeClientHelo = 0x01
	handshakeHeaderLen      = 4

	extServerName = 0x0000
	extALPN       = 0x0010
	// extECH is encrypted_client_hello; extESNI is its predecessor, encrypted_server_name. Either one
	// hides the real name from the gateway.
	extECH  = 0xfe0d
	extESNI = 0xffce

	nameTypeHostName = 0x00
)

// Hello is what the gateway needs to know about a ClientHello.
type Hello struct {
	// ServerName is the host_name of the server_name extension, lower-cased (names compare without
	// regard to case); empty when the client sent none. It never has a trailing dot (RFC 6066 forbids
	// one, and Peek refuses it).
	ServerName string
	// ServerNameIP is valid when ServerName is an IP literal. RFC 6066 forbids those, but some clients
	// send them; the gateway must refuse a TLS connection that names an address rather than a host.
	ServerNameIP netip.Addr
	// ALPN lists the application protocols the client offered, in its order (nil when none).
	ALPN []string
	// ECH reports an encrypted_client_hello extension (or the older encrypted_server_name): the name the
	// client really wants is encrypted, and ServerName is only the public name of whatever server
	// terminates ECH. The gateway cannot check such a connection and must refuse it.
	ECH bool
	// LegacyVersion is the ClientHello's legacy_version field (0x0303 for TLS 1.2 and 1.3).
	LegacyVersion uint16
}

// Peek reads one ClientHello from r: the TLS records that carry it, and not a byte more, so that the
// caller can go on reading the connection itself after it. It copes with a ClientHello fragmented
// across several TLS records and with reads that return any number of bytes.
//
// prefix holds every byte read from r, also on error, so that the caller can replay them upstream
// (or classify them as another protocol, on ErrNotTLS). At most max bytes are read; a ClientHello
// that needs more is ErrTooLarge. Errors wrap ErrNotTLS, ErrMalformed, ErrTooLarge, or the reader's
// own error (io.ErrUnexpectedEOF for a hello cut short).
func Peek(r io.Reader, max int) (hello *Hello, prefix []byte, err error) {
	if max < recordHeaderLen {
		return nil, nil, fmt.Errorf("sni: size limit %d is below one record header: %w", max, ErrTooLarge)
	}
	p := peeker{r: r, max: max, buf: make([]byte, 0, 1024)}
	msg, err := p.handshakeMessage()
	if err != nil {
		return nil, p.buf, err
	}
	h, err := parseClientHello(msg)
	if err != nil {
		return nil, p.buf, err
	}
	return h, p.buf, nil
}

// peeker reads records from r, keeping every byte in buf.
type peeker struct {
	r   io.Reader
	max int
	buf []byte
}

// read appends exactly n more bytes from r to buf and returns them.
func (p *peeker) read(n int) ([]byte, error) {
	if len(p.buf)+n > p.max {
		return nil, fmt.Errorf("sni: reading %d bytes after %d would pass the %d-byte limit: %w",
			n, len(p.buf), p.max, ErrTooLarge)
	}
	start := len(p.buf)
	p.buf = slices.Grow(p.buf, n)[:start+n]
	got, err := io.ReadFull(p.r, p.buf[start:])
	if err != nil {
		// Keep what did arrive: the caller replays or classifies it.
		p.buf = p.buf[:start+got]
		if errors.Is(err, io.EOF) && start > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("sni: reading the ClientHello: %w", err)
	}
	return p.buf[start:], nil
}

// handshakeMessage reads records until they hold one complete handshake message, checks that it is a
// ClientHello and that nothing follows it in its last record, and returns its body.
func (p *peeker) handshakeMessage() ([]byte, error) {
	var msg []byte
	for first := true; ; first = false {
		var hdr []byte
		if first {
			// One byte first: a client that speaks another protocol may have sent fewer than five
			// bytes and be waiting for an answer.
			b, err := p.read(1)
			if err != nil {
				return nil, err
			}
			if b[0] != recordTypeHandshake {
				return nil, fmt.Errorf("sni: first byte 0x%02x: %w", b[0], ErrNotTLS)
			}
			if _, err := p.read(recordHeaderLen - 1); err != nil {
				return nil, err
			}
			hdr = p.buf[len(p.buf)-recordHeaderLen:]
		} else {
			var err error
			if hdr, err = p.read(recordHeaderLen); err != nil {
				return nil, err
			}
		}
		if hdr[0] != recordTypeHandshake {
			return nil, fmt.Errorf("sni: record of type %d inside the ClientHello: %w", hdr[0], ErrMalformed)
		}
		if hdr[1] != 3 {
			return nil, fmt.Errorf("sni: record version 0x%02x%02x: %w", hdr[1], hdr[2], ErrMalformed)
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		if n == 0 || n > maxPlaintextRecord {
			return nil, fmt.Errorf("sni: record length %d: %w", n, ErrMalformed)
		}
		body, err := p.read(n)
		if err != nil {
			return nil, err
		}
		msg = append(msg, body...)
		if len(msg) < handshakeHeaderLen {
			continue
		}
		if msg[0] != handshakeTypeClientHelo {
			return nil, fmt.Errorf("sni: handshake message type %d, want ClientHello: %w", msg[0], ErrMalformed)
		}
		want := handshakeHeaderLen + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
		// Records still to come need at least their bodies plus one header each.
		if rest := want - len(msg); rest > 0 && len(p.buf)+rest+recordHeaderLen > p.max {
			return nil, fmt.Errorf("sni: ClientHello of %d bytes: %w", want, ErrTooLarge)
		}
		switch {
		case len(msg) == want:
			return msg[handshakeHeaderLen:], nil
		case len(msg) > want:
			return nil, fmt.Errorf("sni: %d bytes after the ClientHello in its record: %w", len(msg)-want, ErrMalformed)
		}
	}
}

// parseClientHello parses a ClientHello body (RFC 8446 section 4.1.2), which must be consumed exactly.
func parseClientHello(b []byte) (*Hello, error) {
	s := cursor(b)
	var h Hello
	var ok bool
	if h.LegacyVersion, ok = s.u16(); !ok || h.LegacyVersion>>8 != 3 {
		return nil, malformed("legacy_version")
	}
	if _, ok = s.bytes(32); !ok {
		return nil, malformed("random")
	}
	if sid, ok := s.vec8(); !ok || len(sid) > 32 {
		return nil, malformed("legacy_session_id")
	}
	if cs, ok := s.vec16(); !ok || len(cs) < 2 || len(cs)%2 != 0 {
		return nil, malformed("cipher_suites")
	}
	if cm, ok := s.vec8(); !ok || len(cm) < 1 {
		return nil, malformed("legacy_compression_methods")
	}
	if len(s) == 0 {
		return &h, nil // a hello without extensions (TLS 1.2 and older allow it): no name at all
	}
	exts, ok := s.vec16()
	if !ok || len(s) != 0 {
		return nil, malformed("extensions")
	}
	seen := make(map[uint16]bool)
	for len(exts) > 0 {
		typ, ok := exts.u16()
		if !ok {
			return nil, malformed("extension type")
		}
		data, ok := exts.vec16()
		if !ok {
			return nil, malformed(fmt.Sprintf("extension 0x%04x", typ))
		}
		if seen[typ] {
			return nil, malformed(fmt.Sprintf("repeated extension 0x%04x", typ))
		}
		seen[typ] = true
		var err error
		switch typ {
		case extServerName:
			err = h.parseServerName(data)
		case extALPN:
			err = h.parseALPN(data)
		case extECH, extESNI:
			h.ECH = true
		}
		if err != nil {
			return nil, err
		}
	}
	return &h, nil
}

// parseServerName parses a ServerNameList (RFC 6066 section 3). It accepts exactly one host_name:
// with two, different servers could pick different ones, and the gateway would check the wrong one.
func (h *Hello) parseServerName(data cursor) error {
	list, ok := data.vec16()
	if !ok || len(data) != 0 || len(list) == 0 {
		return malformed("server_name list")
	}
	typ, ok := list.u8()
	if !ok {
		return malformed("server_name type")
	}
	name, ok := list.vec16()
	if !ok || len(name) == 0 {
		return malformed("server_name host_name")
	}
	if typ != nameTypeHostName {
		return malformed(fmt.Sprintf("server_name of unknown type %d", typ))
	}
	if len(list) != 0 {
		return malformed("more than one server name")
	}
	host := strings.ToLower(string(name))
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return malformed("server_name is an IP address with a zone")
		}
		h.ServerName, h.ServerNameIP = host, ip
		return nil
	}
	if err := checkHostName(host); err != nil {
		return fmt.Errorf("sni: server_name %q: %v: %w", host, err, ErrMalformed)
	}
	h.ServerName = host
	return nil
}

// parseALPN parses a ProtocolNameList (RFC 7301 section 3.1).
func (h *Hello) parseALPN(data cursor) error {
	list, ok := data.vec16()
	if !ok || len(data) != 0 || len(list) == 0 {
		return malformed("ALPN list")
	}
	for len(list) > 0 {
		p, ok := list.vec8()
		if !ok || len(p) == 0 {
			return malformed("ALPN protocol name")
		}
		h.ALPN = append(h.ALPN, string(p))
	}
	return nil
}

// checkHostName accepts a lower-case DNS name in ASCII (internationalised names travel as A-labels):
// letters, digits, '-' and '_', labels of 1 to 63 bytes, 253 bytes in all, no trailing dot.
func checkHostName(s string) error { return hostname.Check(s) }

func malformed(what string) error {
	return fmt.Errorf("sni: bad %s: %w", what, ErrMalformed)
}

// cursor reads big-endian fields off the front of a byte slice.
type cursor []byte

func (c *cursor) bytes(n int) ([]byte, bool) {
	if n < 0 || len(*c) < n {
		return nil, false
	}
	b := (*c)[:n]
	*c = (*c)[n:]
	return b, true
}

func (c *cursor) u8() (uint8, bool) {
	b, ok := c.bytes(1)
	if !ok {
		return 0, false
	}
	return b[0], true
}

func (c *cursor) u16() (uint16, bool) {
	b, ok := c.bytes(2)
	if !ok {
		return 0, false
	}
	return uint16(b[0])<<8 | uint16(b[1]), true
}

func (c *cursor) vec8() (cursor, bool) {
	n, ok := c.u8()
	if !ok {
		return nil, false
	}
	b, ok := c.bytes(int(n))
	return b, ok
}

func (c *cursor) vec16() (cursor, bool) {
	n, ok := c.u16()
	if !ok {
		return nil, false
	}
	b, ok := c.bytes(int(n))
	return b, ok
}
