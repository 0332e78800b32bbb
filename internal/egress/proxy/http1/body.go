package http1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxChunkLine bounds a chunk-size line without its CRLF (net/http refuses 4096 bytes and more).
const maxChunkLine = 1024

// chunkState is what reading a chunked body must remember between chunk lines.
type chunkState struct {
	// excess is net/http's count of bytes that are not data (chunk lines, extensions), less an
	// allowance per chunk: net/http refuses a body whose excess passes 16 KiB, so the gateway does
	// too, at the same byte, rather than forward a body the server would cut short.
	excess int64
}

// line parses one chunk-size line (RFC 9112 section 7.1) without its CRLF: 1 to 16 hex digits, then
// extensions ";name" or ";name=value" (value a token or a quoted string), no blanks anywhere. It
// returns the chunk's size.
func (s *chunkState) line(line []byte) (uint64, error) {
	if len(line) > maxChunkLine {
		return 0, fmt.Errorf("chunk line longer than %d bytes: %w", maxChunkLine, ErrMalformed)
	}
	digits := line
	ext := []byte(nil)
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		digits, ext = line[:i], line[i:]
	}
	if len(digits) == 0 || len(digits) > 16 || !IsHex(string(digits)) {
		return 0, fmt.Errorf("chunk size %q: %w", Truncate(string(digits), 20), ErrMalformed)
	}
	size, err := strconv.ParseUint(string(digits), 16, 64)
	if err != nil || size > 1<<62 {
		return 0, fmt.Errorf("chunk size %q: %w", Truncate(string(digits), 20), ErrMalformed)
	}
	if err := checkChunkExt(ext); err != nil {
		return 0, err
	}
	s.excess += int64(len(line)) + 2
	s.excess = max(s.excess-16-2*int64(size), 0)
	if s.excess > 16<<10 {
		return 0, fmt.Errorf("chunked body with too much besides data: %w", ErrMalformed)
	}
	return size, nil
}

// checkChunkExt checks chunk extensions: *( ";" token [ "=" ( token / quoted-string ) ] ).
func checkChunkExt(ext []byte) error {
	bad := fmt.Errorf("chunk extension %q: %w", Truncate(string(ext), 40), ErrMalformed)
	for len(ext) > 0 {
		if ext[0] != ';' {
			return bad
		}
		ext = ext[1:]
		n := tokenLen(ext)
		if n == 0 {
			return bad
		}
		ext = ext[n:]
		if len(ext) == 0 || ext[0] != '=' {
			continue
		}
		ext = ext[1:]
		if len(ext) > 0 && ext[0] == '"' {
			end := quotedLen(ext)
			if end == 0 {
				return bad
			}
			ext = ext[end:]
			continue
		}
		if n = tokenLen(ext); n == 0 {
			return bad
		}
		ext = ext[n:]
	}
	return nil
}

func tokenLen(b []byte) int {
	n := 0
	for n < len(b) && isTokenByte(b[n]) {
		n++
	}
	return n
}

// quotedLen is the length of the quoted string at the start of b, or 0 if it is not one.
func quotedLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i == len(b) || b[i] < 0x20 && b[i] != '\t' || b[i] == 0x7f {
				return 0
			}
		case c < 0x20 && c != '\t' || c == 0x7f:
			return 0
		}
	}
	return 0
}

// ReadLine reads one CRLF-terminated line of at most max bytes (CRLF included), refusing a bare CR
// or LF.
func ReadLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("line longer than %d bytes: %w", max, ErrMalformed)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return nil, unexpected(err)
		}
		if !bytes.HasSuffix(line, []byte("\r\n")) || bytes.IndexByte(line[:len(line)-2], '\r') >= 0 {
			return nil, fmt.Errorf("line without CRLF: %w", ErrMalformed)
		}
		return line, nil
	}
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ChunkedReader decodes one strict chunked request body from a reader positioned at its first chunk
// line, stopping after the last chunk and the empty trailer section: the next request starts where
// it stops. Trailer fields are refused (nothing the gateway forwards sends them, and they are where
// parsers disagree most).
type ChunkedReader struct {
	br     *bufio.Reader
	st     chunkState
	left   uint64 // of the current chunk
	inData bool
	done   bool
	err    error
}

// NewChunkedReader reads a chunked body from br.
func NewChunkedReader(br *bufio.Reader) *ChunkedReader { return &ChunkedReader{br: br} }

// Read reads decoded body bytes; io.EOF once the body, its last chunk and trailer section are read.
func (c *ChunkedReader) Read(p []byte) (int, error) {
	for c.err == nil && !c.inData && !c.done {
		c.err = c.next()
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	if uint64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= uint64(n)
	if err != nil {
		c.err = unexpected(err)
		return n, c.err
	}
	if c.left == 0 {
		c.inData = false
		c.err = expectCRLF(c.br, errNoCRLF)
	}
	return n, nil
}

// next reads a chunk line (and, after the last chunk, the end of the trailer section).
func (c *ChunkedReader) next() error {
	line, err := ReadLine(c.br, maxChunkLine+2)
	if err != nil {
		return err
	}
	size, err := c.st.line(line[:len(line)-2])
	if err != nil {
		return err
	}
	if size > 0 {
		c.left, c.inData = size, true
		return nil
	}
	if err := expectCRLF(c.br, errTrailer); err != nil {
		return err
	}
	c.done = true
	return nil
}

var errTrailer = fmt.Errorf("trailer fields after a chunked body are not forwarded: %w", ErrMalformed)

var errNoCRLF = fmt.Errorf("chunk not followed by CRLF: %w", ErrMalformed)

// expectCRLF consumes a CRLF, or returns bad at the first byte that is not one (as Framer does).
func expectCRLF(br *bufio.Reader, bad error) error {
	b, err := br.Peek(2)
	if len(b) > 0 && b[0] != '\r' || len(b) > 1 && b[1] != '\n' {
		return bad
	}
	if len(b) < 2 {
		return unexpected(err)
	}
	_, _ = br.Discard(2)
	return nil
}

// CopyChunked decodes a strict chunked body from br and writes it to dst re-encoded by the gateway:
// each piece read as a chunk of its own size, no extensions, an empty trailer section. buf is the
// copy buffer (at least 64 bytes); it returns the bytes written to dst.
func CopyChunked(dst io.Writer, br *bufio.Reader, buf []byte) (int64, error) {
	const room = 18 // before the data: up to 16 hex digits and CRLF
	cr := NewChunkedReader(br)
	data := buf[room : len(buf)-2]
	var total int64
	for {
		n, err := cr.Read(data)
		if n > 0 {
			var size [room]byte
			h := append(strconv.AppendUint(size[:0], uint64(n), 16), '\r', '\n')
			start := room - len(h)
			copy(buf[start:], h)
			buf[room+n], buf[room+n+1] = '\r', '\n'
			m, werr := dst.Write(buf[start : room+n+2])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if errors.Is(err, io.EOF) {
			m, werr := io.WriteString(dst, "0\r\n\r\n")
			return total + int64(m), werr
		}
		if err != nil {
			return total, err
		}
	}
}
