package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/hostname"
)

// The gateway reads HTTP/1.x heads itself rather than with net/http, for two reasons: net/http's
// server folds the Host header into the request URI's host (so it cannot tell that they disagree),
// and it is lenient in ways a gateway must not be (a server behind it might read a lenient request
// differently, which is how request smuggling and Host confusion work). So this parser is strict: one
// space between request-line parts, CRLF line ends, no folded or space-preceded header names, at most
// one Host, one Content-Length or one "Transfer-Encoding: chunked" and never both. Anything else is
// refused, so the gateway and the server can only ever see the same request.

// errMalformed is wrapped by every parse error.
var errMalformed = errors.New("malformed HTTP message")

// maxHead bounds one request or response head.
const maxHead = 64 << 10

// field is one header field as sent (name case kept).
type field struct{ name, value string }

// authority is a host and port as they appear in a request URI or Host header.
type authority struct {
	host string // lower-case, no trailing dot, IPv6 without brackets
	port uint16 // 0 when absent
	// ip is set for an IP literal, or for anything shaped like one (an all-numeric or hex last label,
	// as in "2130706433" or "0x7f.1", which resolvers and libraries read as addresses).
	ip bool
}

func (a authority) String() string {
	h := a.host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if a.port == 0 {
		return h
	}
	return h + ":" + strconv.Itoa(int(a.port))
}

// request is a parsed request head.
type request struct {
	raw     []byte
	method  string
	target  string
	version string // "HTTP/1.1" or "HTTP/1.0"
	fields  []field

	// form is how the target is written: origin ("/path"), absolute ("http://host/path"), authority
	// (CONNECT's "host:port") or asterisk (OPTIONS *).
	form   string
	scheme string    // absolute form only, lower-case
	uri    authority // absolute and authority forms
	path   string    // path without query, for the audit log (queries may carry secrets)
	// pathQuery is the origin-form equivalent of the target, for forwarding an absolute-form request.
	pathQuery string

	host    authority // the Host header
	hasHost bool

	contentLength int64 // -1: none
	chunked       bool
	upgrade       bool // Upgrade header, or "upgrade" among the Connection options
}

// readHead reads one message head (start line and header fields, through the empty line) from br and
// returns its bytes. Lines must end in CRLF; a head larger than max is an error.
func readHead(br *bufio.Reader, max int) ([]byte, error) {
	var head []byte
	lineStart := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if len(head)+len(chunk) > max {
			return nil, fmt.Errorf("head larger than %d bytes: %w", max, errMalformed)
		}
		head = append(head, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(head) == 0 {
					return nil, io.EOF
				}
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("reading a head: %w", err)
		}
		line := head[lineStart:]
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return nil, fmt.Errorf("line without CRLF: %w", errMalformed)
		}
		if len(line) == 2 {
			if lineStart == 0 {
				return nil, fmt.Errorf("empty line before the start line: %w", errMalformed)
			}
			return head, nil
		}
		lineStart = len(head)
	}
}

// splitHead splits a head into its start line and field lines (without CRLFs), refusing a bare CR.
func splitHead(raw []byte) (start string, lines []string, err error) {
	s := strings.TrimSuffix(string(raw), "\r\n\r\n")
	all := strings.Split(s, "\r\n")
	for _, l := range all {
		if strings.ContainsAny(l, "\r\n") {
			return "", nil, fmt.Errorf("bare CR or LF: %w", errMalformed)
		}
	}
	return all[0], all[1:], nil
}

// parseFields parses header field lines.
func parseFields(lines []string) ([]field, error) {
	fields := make([]field, 0, len(lines))
	for _, l := range lines {
		name, value, ok := strings.Cut(l, ":")
		if !ok || !isToken(name) {
			return nil, fmt.Errorf("header line %q: %w", truncate(l, 40), errMalformed)
		}
		value = strings.Trim(value, " \t")
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return nil, fmt.Errorf("control byte in header %s: %w", name, errMalformed)
			}
		}
		fields = append(fields, field{name, value})
	}
	return fields, nil
}

// parseRequest parses a request head read by readHead.
func parseRequest(raw []byte) (*request, error) {
	start, lines, err := splitHead(raw)
	if err != nil {
		return nil, err
	}
	r := &request{raw: raw, contentLength: -1}
	parts := strings.Split(start, " ")
	if len(parts) != 3 {
		return nil, fmt.Errorf("request line %q: %w", truncate(start, 60), errMalformed)
	}
	r.method, r.target, r.version = parts[0], parts[1], parts[2]
	if !isToken(r.method) {
		return nil, fmt.Errorf("method %q: %w", truncate(r.method, 20), errMalformed)
	}
	if r.version != "HTTP/1.1" && r.version != "HTTP/1.0" {
		return nil, fmt.Errorf("version %q: %w", truncate(r.version, 20), errMalformed)
	}
	if r.target == "" {
		return nil, fmt.Errorf("empty request target: %w", errMalformed)
	}
	for i := 0; i < len(r.target); i++ {
		if c := r.target[i]; c <= 0x20 || c >= 0x7f {
			return nil, fmt.Errorf("byte 0x%02x in the request target: %w", c, errMalformed)
		}
		if r.target[i] == '%' && (i+2 >= len(r.target) || !isHex(r.target[i+1:i+3])) {
			return nil, fmt.Errorf("bad percent-encoding in the request target: %w", errMalformed)
		}
	}
	if err := r.parseTarget(); err != nil {
		return nil, err
	}
	if r.fields, err = parseFields(lines); err != nil {
		return nil, err
	}
	var nHost, nCL, nTE int
	for _, f := range r.fields {
		switch strings.ToLower(f.name) {
		case "host":
			nHost++
			if r.host, err = parseAuthority(f.value, false); err != nil {
				return nil, fmt.Errorf("header Host %q: %w", truncate(f.value, 60), err)
			}
			r.hasHost = true
		case "content-length":
			nCL++
			n, err := strconv.ParseInt(f.value, 10, 64)
			if err != nil || n < 0 || !isDigits(f.value) {
				return nil, fmt.Errorf("header Content-Length %q: %w", truncate(f.value, 20), errMalformed)
			}
			r.contentLength = n
		case "transfer-encoding":
			nTE++
			if !strings.EqualFold(f.value, "chunked") || r.version != "HTTP/1.1" {
				return nil, fmt.Errorf("header Transfer-Encoding %q: %w", truncate(f.value, 20), errMalformed)
			}
			r.chunked = true
		case "upgrade":
			r.upgrade = true
		case "connection":
			for opt := range strings.SplitSeq(f.value, ",") {
				if strings.EqualFold(strings.TrimSpace(opt), "upgrade") {
					r.upgrade = true
				}
			}
		}
	}
	switch {
	case nHost > 1:
		return nil, fmt.Errorf("%d Host headers: %w", nHost, errMalformed)
	case nHost == 0 && r.version == "HTTP/1.1" && r.method != "CONNECT":
		return nil, fmt.Errorf("no Host header: %w", errMalformed)
	case nCL > 1 || nTE > 1 || nCL > 0 && nTE > 0:
		return nil, fmt.Errorf("ambiguous body length (%d Content-Length, %d Transfer-Encoding): %w", nCL, nTE, errMalformed)
	}
	return r, nil
}

// parseTarget classifies and parses the request target (RFC 9112 section 3.2).
func (r *request) parseTarget() error {
	t := r.target
	switch {
	case r.method == "CONNECT":
		a, err := parseAuthority(t, true)
		if err != nil {
			return fmt.Errorf("CONNECT target %q: %w", truncate(t, 60), err)
		}
		r.form, r.uri, r.path = "authority", a, ""
	case t == "*":
		if r.method != "OPTIONS" {
			return fmt.Errorf("asterisk target with %s: %w", r.method, errMalformed)
		}
		r.form, r.path, r.pathQuery = "asterisk", "*", "*"
	case t[0] == '/':
		r.form, r.pathQuery = "origin", t
		r.path, _, _ = strings.Cut(t, "?")
	default:
		scheme, rest, ok := strings.Cut(t, "://")
		if !ok || !isScheme(scheme) {
			return fmt.Errorf("request target %q: %w", truncate(t, 60), errMalformed)
		}
		if strings.Contains(rest, "#") {
			return fmt.Errorf("fragment in the request target: %w", errMalformed)
		}
		end := strings.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		a, err := parseAuthority(rest[:end], false)
		if err != nil {
			return fmt.Errorf("request target %q: %w", truncate(t, 60), err)
		}
		r.form, r.scheme, r.uri = "absolute", strings.ToLower(scheme), a
		r.pathQuery = rest[end:]
		if r.pathQuery == "" || r.pathQuery[0] == '?' {
			r.pathQuery = "/" + r.pathQuery
		}
		r.path, _, _ = strings.Cut(r.pathQuery, "?")
	}
	return nil
}

// parseAuthority parses host[:port] (RFC 3986 authority without userinfo, which it refuses: in
// "http://allowed.example@evil.example/" the host is evil.example, and that confusion is the point).
func parseAuthority(s string, needPort bool) (authority, error) {
	var a authority
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return a, fmt.Errorf("unclosed IPv6 literal: %w", errMalformed)
		}
		host, port = s[1:end], s[end+1:]
		if port != "" {
			if port[0] != ':' {
				return a, fmt.Errorf("bytes after an IPv6 literal: %w", errMalformed)
			}
			port = port[1:]
			if port == "" {
				return a, fmt.Errorf("empty port: %w", errMalformed)
			}
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return a, fmt.Errorf("IPv6 literal %q: %w", truncate(host, 50), errMalformed)
		}
		a.host, a.ip = ip.String(), true
	} else {
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, port = s[:i], s[i+1:]
			if port == "" {
				return a, fmt.Errorf("empty port: %w", errMalformed)
			}
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
			a.host, a.ip = ip.String(), true
		} else if err := checkName(host); err != nil {
			return a, fmt.Errorf("host %q: %v: %w", truncate(host, 60), err, errMalformed)
		} else {
			a.host, a.ip = host, numericLabel(host)
		}
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 || !isDigits(port) {
			return a, fmt.Errorf("port %q: %w", truncate(port, 10), errMalformed)
		}
		a.port = uint16(n)
	} else if needPort {
		return a, fmt.Errorf("no port: %w", errMalformed)
	}
	return a, nil
}

// checkName accepts an ASCII DNS name (letters, digits, '-', '_'; labels of 1 to 63 bytes; at most 253
// bytes). Anything else, percent-encoding and userinfo included, is not a name the gateway can judge.
func checkName(s string) error { return hostname.Check(s) }

// numericLabel reports a name whose last label is all digits or hex ("0x7f"): no top-level domain
// looks like that, but inet_aton-style parsers read such names as IPv4 addresses.
func numericLabel(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	return isDigits(last) || strings.HasPrefix(last, "0x")
}

// response is a parsed response head.
type response struct {
	version       string
	status        int
	fields        []field
	contentLength int64 // -1: none
	chunked       bool
}

// parseResponse parses a response head read by readHead.
func parseResponse(raw []byte) (*response, error) {
	start, lines, err := splitHead(raw)
	if err != nil {
		return nil, err
	}
	version, rest, _ := strings.Cut(start, " ")
	code, _, _ := strings.Cut(rest, " ")
	if version != "HTTP/1.1" && version != "HTTP/1.0" || len(code) != 3 || !isDigits(code) {
		return nil, fmt.Errorf("status line %q: %w", truncate(start, 60), errMalformed)
	}
	r := &response{version: version, contentLength: -1}
	r.status, _ = strconv.Atoi(code)
	if r.fields, err = parseFields(lines); err != nil {
		return nil, err
	}
	var nCL, nTE int
	for _, f := range r.fields {
		switch strings.ToLower(f.name) {
		case "content-length":
			nCL++
			n, err := strconv.ParseInt(f.value, 10, 64)
			if err != nil || n < 0 || !isDigits(f.value) {
				return nil, fmt.Errorf("header Content-Length %q: %w", truncate(f.value, 20), errMalformed)
			}
			r.contentLength = n
		case "transfer-encoding":
			nTE++
			// Anything but plain chunked is read until the connection closes (RFC 9112 6.3).
			r.chunked = strings.EqualFold(f.value, "chunked")
		}
	}
	if nCL > 1 || nTE > 1 {
		return nil, fmt.Errorf("ambiguous body length: %w", errMalformed)
	}
	if nTE > 0 {
		r.contentLength = -1
	}
	return r, nil
}

// bodyless reports a response that has no body whatever its headers say (RFC 9112 section 6.3).
func (r *response) bodyless(method string) bool {
	return method == "HEAD" || r.status/100 == 1 || r.status == 204 || r.status == 304
}

// copyChunked copies one chunked body, trailers included, byte for byte from br to dst, checking its
// framing as it goes: a malformed chunk line is an error rather than data the server might frame
// differently.
func copyChunked(dst io.Writer, br *bufio.Reader) (int64, error) {
	var total int64
	for {
		line, err := readLine(br, 4096)
		if err != nil {
			return total, err
		}
		sizeStr, _, _ := strings.Cut(strings.TrimSuffix(line, "\r\n"), ";")
		sizeStr = strings.TrimRight(sizeStr, " \t")
		size, err := strconv.ParseUint(sizeStr, 16, 62)
		if err != nil || sizeStr == "" || !isHex(sizeStr) {
			return total, fmt.Errorf("chunk size %q: %w", truncate(sizeStr, 20), errMalformed)
		}
		n, err := io.WriteString(dst, line)
		total += int64(n)
		if err != nil {
			return total, err
		}
		if size == 0 {
			for { // trailer section
				line, err := readLine(br, 4096)
				if err != nil {
					return total, err
				}
				n, err := io.WriteString(dst, line)
				total += int64(n)
				if err != nil {
					return total, err
				}
				if line == "\r\n" {
					return total, nil
				}
			}
		}
		m, err := io.CopyN(dst, br, int64(size))
		total += m
		if err != nil {
			return total, unexpected(err)
		}
		crlf, err := readLine(br, 2)
		if err != nil || crlf != "\r\n" {
			return total, fmt.Errorf("chunk not followed by CRLF: %w", errMalformed)
		}
		n, err = io.WriteString(dst, crlf)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}

// readLine reads one CRLF-terminated line of at most max bytes.
func readLine(br *bufio.Reader, max int) (string, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return "", fmt.Errorf("line longer than %d bytes: %w", max, errMalformed)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return "", unexpected(err)
		}
		if !bytes.HasSuffix(line, []byte("\r\n")) || bytes.IndexByte(line[:len(line)-2], '\r') >= 0 {
			return "", fmt.Errorf("line without CRLF: %w", errMalformed)
		}
		return string(line), nil
	}
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// isToken reports an RFC 9110 token (method names, header names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return s != ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
