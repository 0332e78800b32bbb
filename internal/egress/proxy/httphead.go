package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/egress/proxy/http1"
)

// The gateway reads HTTP/1.x with its own strict parser (package http1) rather than net/http: see
// that package for why. This file adapts its requests to the handlers' use and reads responses.

// errMalformed is wrapped by every parse error.
var errMalformed = http1.ErrMalformed

// maxHead bounds one request or response head.
const maxHead = http1.MaxHead

// readHead reads one message head (start line and header fields, through the empty line) from br and
// returns its bytes. Lines must end in CRLF; a head larger than max is an error.
func readHead(br *bufio.Reader, max int) ([]byte, error) { return http1.ReadHead(br, max) }

// parseRequest parses a request head read by readHead.
func parseRequest(raw []byte) (*http1.Request, error) { return http1.ParseRequest(raw) }

// parseAuthority parses host[:port]; see http1.ParseAuthority.
func parseAuthority(s string, needPort bool) (http1.Authority, error) {
	return http1.ParseAuthority(s, needPort)
}

// response is a parsed response head.
type response struct {
	version       string
	status        int
	fields        []http1.Field
	contentLength int64 // -1: none
	chunked       bool
	close         bool // the server closes the connection after this response
}

// closes reports a response after which the server closes the connection.
func (r *response) closes() bool { return r.close }

// parseResponse parses a response head read by readHead.
func parseResponse(raw []byte) (*response, error) {
	start, lines, err := http1.SplitHead(raw)
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
	fs, err := http1.ParseFields(lines)
	if err != nil {
		return nil, err
	}
	r.fields = fs
	var nCL, nTE int
	keepAlive := false
	for _, f := range r.fields {
		switch strings.ToLower(f.Name) {
		case "content-length":
			nCL++
			n, err := strconv.ParseInt(f.Value, 10, 64)
			if err != nil || n < 0 || !isDigits(f.Value) {
				return nil, fmt.Errorf("header Content-Length %q: %w", truncate(f.Value, 20), errMalformed)
			}
			r.contentLength = n
		case "transfer-encoding":
			nTE++
			// Anything but plain chunked is read until the connection closes (RFC 9112 6.3).
			r.chunked = strings.EqualFold(f.Value, "chunked")
		case "connection":
			for opt := range strings.SplitSeq(f.Value, ",") {
				switch opt = strings.Trim(opt, " \t"); {
				case strings.EqualFold(opt, "close"):
					r.close = true
				case strings.EqualFold(opt, "keep-alive"):
					keepAlive = true
				}
			}
		}
	}
	if version == "HTTP/1.0" && !keepAlive {
		r.close = true
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

// copyChunked copies one chunked response body, trailers included, byte for byte from br to dst,
// checking its framing as it goes: a malformed chunk line is an error rather than data the client
// might frame differently. (Request bodies are decoded and re-encoded instead: http1.CopyChunked.)
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
	line, err := http1.ReadLine(br, max)
	return string(line), err
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func isDigits(s string) bool { return http1.IsDigits(s) }

func isHex(s string) bool { return http1.IsHex(s) }

func truncate(s string, n int) string { return http1.Truncate(s, n) }
