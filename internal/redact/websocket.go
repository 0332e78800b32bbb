package redact

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrWebsocketFrame is a frame from the server that cannot be searched: masked (a server must not
// mask, and a client that unmasks anyway would read bytes nobody searched), or with a reserved bit
// set (an extension such as compression, which the request did not offer), or of an impossible
// length.
var ErrWebsocketFrame = errors.New("redact: unsearchable websocket frame")

// WebsocketReader returns src, a websocket connection's bytes from the server (RFC 6455), with
// every secret replaced in the frames' payloads. The payloads of all frames, control frames among
// them, are searched as one stream, so a value split across frames (of one message or of two) is
// found; frame headers pass on unchanged, which needs every replacement to be as long as its
// secret (an error otherwise). What is held back, and when it goes, is as for Reader. A frame that
// cannot be searched ends the stream with ErrWebsocketFrame, after the frames before it.
func (r *Replacer) WebsocketReader(src io.Reader, idle time.Duration) (io.ReadCloser, error) {
	if r == nil {
		return io.NopCloser(src), nil
	}
	if !r.sameLength {
		return nil, errors.New("redact: a websocket's frames keep their lengths only with replacements as long as their secrets")
	}
	return r.newReader(src, &wsFrames{}, idle), nil
}

// wsFrames splits a server's websocket bytes into frame headers (framing) and payload.
type wsFrames struct {
	hdr  [10]byte // the header so far (a server's has no masking key)
	n    int      // bytes of hdr read
	need int      // the header's length, once its second byte is read
	left uint64   // payload bytes of the current frame still to come
}

func (f *wsFrames) feed(s *stream, b []byte) error {
	for len(b) > 0 {
		if f.left > 0 {
			k := int(min(f.left, uint64(len(b))))
			s.payload(b[:k])
			b = b[k:]
			f.left -= uint64(k)
			continue
		}
		f.hdr[f.n] = b[0]
		f.n++
		b = b[1:]
		if f.n == 2 {
			if f.hdr[0]&0x70 != 0 {
				return fmt.Errorf("%w: a reserved bit is set (an extension's payload)", ErrWebsocketFrame)
			}
			if f.hdr[1]&0x80 != 0 {
				return fmt.Errorf("%w: masked by the server", ErrWebsocketFrame)
			}
			switch f.hdr[1] & 0x7f {
			case 126:
				f.need = 4
			case 127:
				f.need = 10
			default:
				f.need = 2
			}
		}
		if f.n < 2 || f.n < f.need {
			continue
		}
		switch f.need {
		case 2:
			f.left = uint64(f.hdr[1] & 0x7f)
		case 4:
			f.left = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
		default:
			f.left = binary.BigEndian.Uint64(f.hdr[2:10])
			if f.left>>63 != 0 {
				return fmt.Errorf("%w: its length has the most significant bit set", ErrWebsocketFrame)
			}
		}
		s.framing(f.hdr[:f.n])
		f.n, f.need = 0, 0
	}
	return nil
}
