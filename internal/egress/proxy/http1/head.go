// Package http1 is the gateway's strict reader of HTTP/1.x requests: their heads, and where their
// bodies end. The proxy forwards plain HTTP by it, and the interceptor puts it in front of net/http's
// server, so that everything that reaches a server has been framed by the one parser.
//
// It exists rather than net/http's reader for two reasons: net/http's server folds the Host header
// into the request URI's host (so it cannot tell that they disagree), and it is lenient in ways a
// gateway must not be (a server behind it might read a lenient request differently, which is how
// request smuggling and Host confusion work). So this parser is strict: one space between
// request-line parts, CRLF line ends, no folded or space-preceded header names, at most one Host, one
// Content-Length or one "Transfer-Encoding: chunked" and never both, chunk lines of hex digits and
// well-formed extensions. Anything else is refused (RFC 9112 allows a server to answer 400), so the
// gateway and the server can only ever see the same requests, ending at the same bytes. FuzzFraming
// holds it to net/http's reading of the same bytes.
package http1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/hostname"
)

// ErrMalformed is wrapped by every parse error: the bytes are not a request the gateway forwards.
var ErrMalformed = errors.New("malformed HTTP message")

// MaxHead bounds one request or response head.
const MaxHead = 64 << 10

// Field is one header field as sent (name case kept, value without surrounding blanks).
type Field struct{ Name, Value string }

// Authority is a host and port as they appear in a request URI or Host header.
type Authority struct {
	Host string // lower-case, no trailing dot, IPv6 without brackets
	Port uint16 // 0 when absent
	// IP is set for an IP literal, or for anything shaped like one (an all-numeric or hex last label,
	// as in "2130706433" or "0x7f.1", which resolvers and libraries read as addresses).
	IP bool
}

// String writes the authority back as host[:port], IPv6 in brackets.
func (a Authority) String() string {
	h := a.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if a.Port == 0 {
		return h
	}
	return h + ":" + strconv.Itoa(int(a.Port))
}

// Request is a parsed request head.
type Request struct {
	Raw     []byte
	Method  string
	Target  string
	Version string // "HTTP/1.1" or "HTTP/1.0"
	Fields  []Field

	// Form is how the target is written: origin ("/path"), absolute ("http://host/path"), authority
	// (CONNECT's "host:port") or asterisk (OPTIONS *).
	Form   string
	Scheme string    // absolute form only, lower-case
	URI    Authority // absolute and authority forms
	Path   string    // path without query, for the audit log (queries may carry secrets)
	// PathQuery is the origin-form equivalent of the target, for forwarding an absolute-form request.
	PathQuery string

	Host    Authority // the Host header
	HasHost bool

	ContentLength int64 // -1: none
	Chunked       bool
	Upgrade       bool // Upgrade header, or "upgrade" among the Connection options
	// Close is set when the client asks to close after this request: "Connection: close", or
	// HTTP/1.0 without "Connection: keep-alive".
	Close bool
}

// HasBody reports whether the request's framing announces a body (chunked, or a non-zero length).
func (r *Request) HasBody() bool { return r.Chunked || r.ContentLength > 0 }

// ReadHead reads one message head (start line and header fields, through the empty line) from br and
// returns its bytes. Lines must end in CRLF; a head larger than max is an error. io.EOF means the
// stream ended cleanly before the head's first byte.
func ReadHead(br *bufio.Reader, max int) ([]byte, error) {
	var head []byte
	lineStart := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if len(head)+len(chunk) > max {
			return nil, fmt.Errorf("head larger than %d bytes: %w", max, ErrMalformed)
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
			return nil, fmt.Errorf("line without CRLF: %w", ErrMalformed)
		}
		if len(line) == 2 {
			if lineStart == 0 {
				return nil, fmt.Errorf("empty line before the start line: %w", ErrMalformed)
			}
			return head, nil
		}
		lineStart = len(head)
	}
}

// SplitHead splits a head into its start line and field lines (without CRLFs), refusing a bare CR.
func SplitHead(raw []byte) (start string, lines []string, err error) {
	s := strings.TrimSuffix(string(raw), "\r\n\r\n")
	all := strings.Split(s, "\r\n")
	for _, l := range all {
		if strings.ContainsAny(l, "\r\n") {
			return "", nil, fmt.Errorf("bare CR or LF: %w", ErrMalformed)
		}
	}
	return all[0], all[1:], nil
}

// ParseFields parses header field lines. A line starting with a blank (obs-fold), a blank before the
// colon, or a control byte in a value is refused.
func ParseFields(lines []string) ([]Field, error) {
	fields := make([]Field, 0, len(lines))
	for _, l := range lines {
		name, value, ok := strings.Cut(l, ":")
		if !ok || !IsToken(name) {
			return nil, fmt.Errorf("header line %q: %w", Truncate(name, 40), ErrMalformed)
		}
		value = strings.Trim(value, " \t")
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return nil, fmt.Errorf("control byte in header %s: %w", name, ErrMalformed)
			}
		}
		fields = append(fields, Field{name, value})
	}
	return fields, nil
}

// ParseRequest parses a request head read by ReadHead.
func ParseRequest(raw []byte) (*Request, error) {
	start, lines, err := SplitHead(raw)
	if err != nil {
		return nil, err
	}
	r := &Request{Raw: raw, ContentLength: -1}
	parts := strings.Split(start, " ")
	if len(parts) != 3 {
		return nil, fmt.Errorf("request line %q: %w", Truncate(noQuery(start), 60), ErrMalformed)
	}
	r.Method, r.Target, r.Version = parts[0], parts[1], parts[2]
	if !IsToken(r.Method) {
		return nil, fmt.Errorf("method %q: %w", Truncate(r.Method, 20), ErrMalformed)
	}
	if r.Version != "HTTP/1.1" && r.Version != "HTTP/1.0" {
		return nil, fmt.Errorf("version %q: %w", Truncate(r.Version, 20), ErrMalformed)
	}
	if r.Target == "" {
		return nil, fmt.Errorf("empty request target: %w", ErrMalformed)
	}
	for i := 0; i < len(r.Target); i++ {
		if c := r.Target[i]; c <= 0x20 || c >= 0x7f {
			return nil, fmt.Errorf("byte 0x%02x in the request target: %w", c, ErrMalformed)
		}
		if r.Target[i] == '%' && (i+2 >= len(r.Target) || !IsHex(r.Target[i+1:i+3])) {
			return nil, fmt.Errorf("bad percent-encoding in the request target: %w", ErrMalformed)
		}
	}
	if err := r.parseTarget(); err != nil {
		return nil, err
	}
	if r.Fields, err = ParseFields(lines); err != nil {
		return nil, err
	}
	if err := r.parseFraming(); err != nil {
		return nil, err
	}
	return r, nil
}

// parseFraming reads the fields that say who the request is for and where it ends.
func (r *Request) parseFraming() error {
	var nHost, nCL, nTE int
	keepAlive := false
	var err error
	for _, f := range r.Fields {
		switch strings.ToLower(f.Name) {
		case "host":
			nHost++
			if r.Host, err = ParseAuthority(f.Value, false); err != nil {
				return fmt.Errorf("header Host %q: %w", Truncate(f.Value, 60), err)
			}
			r.HasHost = true
		case "content-length":
			nCL++
			n, err := strconv.ParseInt(f.Value, 10, 64)
			if err != nil || n < 0 || !IsDigits(f.Value) {
				return fmt.Errorf("header Content-Length %q: %w", Truncate(f.Value, 20), ErrMalformed)
			}
			r.ContentLength = n
		case "transfer-encoding":
			// Exactly "chunked": "chunked, identity", "xchunked" or "gzip, chunked" are read
			// differently by different servers, so none of them is forwarded.
			nTE++
			if !strings.EqualFold(f.Value, "chunked") || r.Version != "HTTP/1.1" {
				return fmt.Errorf("header Transfer-Encoding %q: %w", Truncate(f.Value, 20), ErrMalformed)
			}
			r.Chunked = true
		case "upgrade":
			r.Upgrade = true
		case "connection":
			for opt := range strings.SplitSeq(f.Value, ",") {
				switch opt = strings.Trim(opt, " \t"); {
				case strings.EqualFold(opt, "upgrade"):
					r.Upgrade = true
				case strings.EqualFold(opt, "close"):
					r.Close = true
				case strings.EqualFold(opt, "keep-alive"):
					keepAlive = true
				}
			}
		case "trailer":
			// net/http refuses these as trailer names; the gateway refuses them as well.
			for name := range strings.SplitSeq(f.Value, ",") {
				switch strings.ToLower(strings.Trim(name, " \t")) {
				case "transfer-encoding", "trailer", "content-length":
					return fmt.Errorf("header Trailer %q: %w", Truncate(f.Value, 40), ErrMalformed)
				}
			}
		}
	}
	if r.Version == "HTTP/1.0" && !keepAlive {
		r.Close = true
	}
	switch {
	case nHost > 1:
		return fmt.Errorf("%d Host headers: %w", nHost, ErrMalformed)
	case nHost == 0 && r.Version == "HTTP/1.1" && r.Method != "CONNECT":
		return fmt.Errorf("no Host header: %w", ErrMalformed)
	case nCL > 1 || nTE > 1 || nCL > 0 && nTE > 0:
		return fmt.Errorf("ambiguous body length (%d Content-Length, %d Transfer-Encoding): %w", nCL, nTE, ErrMalformed)
	}
	return nil
}

// parseTarget classifies and parses the request target (RFC 9112 section 3.2).
func (r *Request) parseTarget() error {
	t := r.Target
	switch {
	case r.Method == "CONNECT":
		a, err := ParseAuthority(t, true)
		if err != nil {
			return fmt.Errorf("CONNECT target %q: %w", Truncate(t, 60), err)
		}
		r.Form, r.URI, r.Path = "authority", a, ""
	case t == "*":
		if r.Method != "OPTIONS" {
			return fmt.Errorf("asterisk target with %s: %w", r.Method, ErrMalformed)
		}
		r.Form, r.Path, r.PathQuery = "asterisk", "*", "*"
	case t[0] == '/':
		r.Form, r.PathQuery = "origin", t
		r.Path, _, _ = strings.Cut(t, "?")
	default:
		scheme, rest, ok := strings.Cut(t, "://")
		if !ok || !isScheme(scheme) {
			return fmt.Errorf("request target %q: %w", Truncate(noQuery(t), 60), ErrMalformed)
		}
		if strings.Contains(rest, "#") {
			return fmt.Errorf("fragment in the request target: %w", ErrMalformed)
		}
		end := strings.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		a, err := ParseAuthority(rest[:end], false)
		if err != nil {
			return fmt.Errorf("request target %q: %w", Truncate(noQuery(t), 60), err)
		}
		r.Form, r.Scheme, r.URI = "absolute", strings.ToLower(scheme), a
		r.PathQuery = rest[end:]
		if r.PathQuery == "" || r.PathQuery[0] == '?' {
			r.PathQuery = "/" + r.PathQuery
		}
		r.Path, _, _ = strings.Cut(r.PathQuery, "?")
	}
	return nil
}

// ParseAuthority parses host[:port] (RFC 3986 authority without userinfo, which it refuses: in
// "http://allowed.example@evil.example/" the host is evil.example, and that confusion is the point).
func ParseAuthority(s string, needPort bool) (Authority, error) {
	var a Authority
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return a, fmt.Errorf("unclosed IPv6 literal: %w", ErrMalformed)
		}
		host, port = s[1:end], s[end+1:]
		if port != "" {
			if port[0] != ':' {
				return a, fmt.Errorf("bytes after an IPv6 literal: %w", ErrMalformed)
			}
			port = port[1:]
			if port == "" {
				return a, fmt.Errorf("empty port: %w", ErrMalformed)
			}
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return a, fmt.Errorf("IPv6 literal %q: %w", Truncate(host, 50), ErrMalformed)
		}
		a.Host, a.IP = ip.String(), true
	} else {
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, port = s[:i], s[i+1:]
			if port == "" {
				return a, fmt.Errorf("empty port: %w", ErrMalformed)
			}
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
			a.Host, a.IP = ip.String(), true
		} else if err := hostname.Check(host); err != nil {
			return a, fmt.Errorf("host %q: %v: %w", Truncate(host, 60), err, ErrMalformed)
		} else {
			a.Host, a.IP = host, numericLabel(host)
		}
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 || !IsDigits(port) {
			return a, fmt.Errorf("port %q: %w", Truncate(port, 10), ErrMalformed)
		}
		a.Port = uint16(n)
	} else if needPort {
		return a, fmt.Errorf("no port: %w", ErrMalformed)
	}
	return a, nil
}

// numericLabel reports a name whose last label is all digits or hex ("0x7f"): no top-level domain
// looks like that, but inet_aton-style parsers read such names as IPv4 addresses.
func numericLabel(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	return IsDigits(last) || strings.HasPrefix(last, "0x")
}

// IsToken reports an RFC 9110 token (method names, header names).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
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

// IsDigits reports a non-empty string of ASCII digits.
func IsDigits(s string) bool {
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

// IsHex reports a non-empty string of hex digits.
func IsHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return s != ""
}

// Truncate shortens s to n bytes for an error message or an audit detail.
func Truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// noQuery cuts s at its first '?': errors and audit details quote a request's target or line, never
// its query, which may carry a token (the audit log records paths without queries throughout). A
// malformed header line is quoted by its name alone, for the same reason.
func noQuery(s string) string {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		return s[:i] + "?…"
	}
	return s
}
