package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/cordon-sandbox/cordon/internal/egress/proxy/http1"
	"github.com/cordon-sandbox/cordon/internal/egress/sni"
)

// kind is what a client's first bytes say it speaks.
type kind int

const (
	// kindTCP is any other protocol (or a client that has sent nothing yet): relayed as is.
	kindTCP kind = iota
	kindTLS
	kindHTTP
)

func (k kind) String() string {
	return [...]string{"tcp", "tls", "http"}[k]
}

// sniffed is what the gateway learned from a client's first bytes.
type sniffed struct {
	kind  kind
	hello *sni.Hello     // kindTLS
	req   *http1.Request // kindHTTP: the first request, its head consumed from the reader
	// prefix holds the bytes taken from the reader that must go upstream first (kindTLS, kindTCP).
	prefix []byte
	// err is set when the bytes are TLS or HTTP but malformed: the connection is refused.
	err error
}

// sniff classifies the client's first bytes. With firstByte > 0, a client silent for that long is
// kindTCP with nothing read (a protocol where the server speaks first); with 0 it waits as long as the
// client does. Once bytes arrive, the client has HeaderTimeout to complete its ClientHello or request
// head. A read error other than a timeout is returned.
func (g *Gateway) sniff(c net.Conn, br *bufio.Reader, firstByte time.Duration) (sniffed, error) {
	defer c.SetReadDeadline(time.Time{})
	if firstByte > 0 {
		_ = c.SetReadDeadline(time.Now().Add(firstByte))
	}
	first, err := br.Peek(1)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.EOF) {
			return sniffed{kind: kindTCP}, nil // silent, or closed its side without a word
		}
		return sniffed{}, fmt.Errorf("proxy: reading the first bytes: %w", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(g.cfg.HeaderTimeout))
	if first[0] == 0x16 {
		hello, prefix, err := sni.Peek(br, maxHello)
		if err != nil {
			return sniffed{kind: kindTLS, err: err}, nil
		}
		return sniffed{kind: kindTLS, hello: hello, prefix: append(prefix, drain(br)...)}, nil
	}
	k, err := classify(br)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Bytes that could still become an HTTP request line, then silence: refuse rather than
			// relay a request nobody checked.
			return sniffed{kind: kindHTTP, err: fmt.Errorf("incomplete first line: %w", err)}, nil
		}
		return sniffed{}, fmt.Errorf("proxy: reading the first line: %w", err)
	}
	if k == kindTCP {
		return sniffed{kind: kindTCP, prefix: drain(br)}, nil
	}
	raw, err := readHead(br, maxHead)
	if err != nil {
		return sniffed{kind: kindHTTP, err: err}, nil
	}
	req, err := parseRequest(raw)
	return sniffed{kind: kindHTTP, req: req, err: err}, nil
}

// drain takes whatever br has buffered.
func drain(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	out := bytes.Clone(b)
	_, _ = br.Discard(len(out))
	return out
}

// classify decides, from the first line a client sends, whether it is HTTP, without consuming it.
// The rule errs towards HTTP, because HTTP is checked (Host must match) while other protocols are
// relayed unread: a request that some lenient server would take for HTTP/1.x must not slip through as
// "other". So the line counts as HTTP when it is empty (servers skip leading blank lines), mentions
// "HTTP/" anywhere, or starts like a request ("WORD /", "WORD *", "WORD http:"); and a line cut short
// by a control byte is judged on what came before it. The strict parser then refuses whatever of that
// is not a well-formed request.
func classify(br *bufio.Reader) (kind, error) {
	pos := 0
	for {
		buf, _ := br.Peek(br.Buffered())
		for ; pos < len(buf); pos++ {
			switch c := buf[pos]; {
			case c == '\r' || c == '\n':
				return classifyLine(buf[:pos], true), nil
			case c < 0x20 && c != '\t' || c == 0x7f:
				return classifyLine(buf[:pos], false), nil
			}
		}
		if len(buf) == br.Size() {
			return kindHTTP, nil // a long printable line: only a request line is that long
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if errors.Is(err, io.EOF) {
				buf, _ = br.Peek(br.Buffered())
				return classifyLine(buf, false), nil
			}
			return kindTCP, err
		}
	}
}

func classifyLine(line []byte, complete bool) kind {
	if complete && len(line) == 0 {
		return kindHTTP
	}
	if bytes.Contains(bytes.ToUpper(line), []byte("HTTP/")) {
		return kindHTTP
	}
	// A method-shaped word, blanks, then the start of a request target.
	i := 0
	for i < len(line) && ('A' <= line[i] && line[i] <= 'Z' || 'a' <= line[i] && line[i] <= 'z') {
		i++
	}
	if i == 0 || i == len(line) || line[i] != ' ' && line[i] != '\t' {
		return kindTCP
	}
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	rest := bytes.ToLower(line[i:])
	if bytes.HasPrefix(rest, []byte("/")) || bytes.HasPrefix(rest, []byte("*")) ||
		bytes.HasPrefix(rest, []byte("http:")) || bytes.HasPrefix(rest, []byte("https:")) {
		return kindHTTP
	}
	return kindTCP
}
