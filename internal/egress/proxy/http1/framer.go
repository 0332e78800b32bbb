package http1

import (
	"bytes"
	"fmt"
)

// framerState is where in a request a Framer is.
type framerState int

const (
	inHead      framerState = iota // waiting for a whole request head
	inBody                         // Content-Length bytes
	inChunkLine                    // a chunk-size line
	inChunkData                    // a chunk's bytes
	inChunkCRLF                    // the CRLF after a chunk's bytes
	inTrailer                      // the (empty) trailer section after the last chunk
)

// Framer follows a stream of HTTP/1.x requests as its bytes arrive, by the same rules as ReadHead,
// ParseRequest and ChunkedReader, without consuming anything: it says how many of the bytes it is
// shown are framed (a whole request head, body bytes, a chunk line), so that a reader in front of
// another HTTP server can pass on exactly those and refuse the stream at the first byte the strict
// reader would refuse. Then the server behind it reads only requests the gateway reads the same way.
// The zero Framer expects a request head.
type Framer struct {
	state   framerState
	left    uint64 // of the body or chunk
	chunks  chunkState
	scanned int // inHead: bytes of the head already seen to be whole CRLF lines
	last    *Request
}

// Last is the most recent request head the Framer passed.
func (f *Framer) Last() *Request { return f.last }

// AtHead reports whether the Framer expects a request head next.
func (f *Framer) AtHead() bool { return f.state == inHead }

// InBody reports how many bytes of a Content-Length body or a chunk's data are still to come: bytes
// that may pass without being looked at (see Skip). It is 0 elsewhere.
func (f *Framer) InBody() uint64 {
	if f.state == inBody || f.state == inChunkData {
		return f.left
	}
	return 0
}

// Skip accounts for n body bytes (at most InBody) passed without Next.
func (f *Framer) Skip(n int) {
	f.left -= uint64(n)
	if f.left == 0 {
		f.endData()
	}
}

func (f *Framer) endData() {
	if f.state == inBody {
		f.state = inHead
	} else {
		f.state = inChunkCRLF
	}
}

// Next looks at buf, the bytes not yet passed, and returns how many at its start are framed and may
// pass. 0 and no error mean it needs more bytes to say; an error (wrapping ErrMalformed) means the
// stream must be refused here.
func (f *Framer) Next(buf []byte) (int, error) {
	switch f.state {
	case inHead:
		return f.head(buf)
	case inBody, inChunkData:
		n := len(buf)
		if uint64(n) > f.left {
			n = int(f.left)
		}
		f.Skip(n)
		return n, nil
	case inChunkLine:
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			if len(buf) > maxChunkLine+1 {
				return 0, fmt.Errorf("chunk line longer than %d bytes: %w", maxChunkLine, ErrMalformed)
			}
			return 0, nil
		}
		if i == 0 || buf[i-1] != '\r' || bytes.IndexByte(buf[:i-1], '\r') >= 0 {
			return 0, fmt.Errorf("line without CRLF: %w", ErrMalformed)
		}
		size, err := f.chunks.line(buf[:i-1])
		if err != nil {
			return 0, err
		}
		f.left = size
		f.state = inChunkData
		if size == 0 {
			f.state = inTrailer
		}
		return i + 1, nil
	case inChunkCRLF, inTrailer:
		if len(buf) > 0 && buf[0] != '\r' || len(buf) > 1 && buf[1] != '\n' {
			if f.state == inTrailer {
				return 0, errTrailer
			}
			return 0, errNoCRLF
		}
		if len(buf) < 2 {
			return 0, nil
		}
		if f.state == inTrailer {
			f.state = inHead
		} else {
			f.state = inChunkLine
		}
		return 2, nil
	}
	panic("http1: Framer in an unknown state")
}

// head looks for a whole request head at the start of buf, line by line as ReadHead reads it.
func (f *Framer) head(buf []byte) (int, error) {
	for {
		i := bytes.IndexByte(buf[f.scanned:], '\n')
		if i < 0 {
			if len(buf) > MaxHead {
				return 0, fmt.Errorf("head larger than %d bytes: %w", MaxHead, ErrMalformed)
			}
			return 0, nil
		}
		end := f.scanned + i + 1
		if end > MaxHead {
			return 0, fmt.Errorf("head larger than %d bytes: %w", MaxHead, ErrMalformed)
		}
		line := buf[f.scanned:end]
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return 0, fmt.Errorf("line without CRLF: %w", ErrMalformed)
		}
		if len(line) > 2 {
			f.scanned = end
			continue
		}
		if f.scanned == 0 {
			return 0, fmt.Errorf("empty line before the start line: %w", ErrMalformed)
		}
		f.scanned = 0
		r, err := ParseRequest(bytes.Clone(buf[:end]))
		if err != nil {
			return 0, err
		}
		f.last = r
		switch {
		case r.Chunked:
			f.state = inChunkLine
			f.chunks = chunkState{}
		case r.ContentLength > 0:
			f.state, f.left = inBody, uint64(r.ContentLength)
		}
		return end, nil
	}
}
