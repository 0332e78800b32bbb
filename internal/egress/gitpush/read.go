package gitpush

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxHead bounds what Read buffers of a body: the commands (and push options) decoded, and the bytes
// read to get them. A push of more refs than fit is refused; 1 MiB is some ten thousand refs.
const MaxHead = 1 << 20

// maxPkt is the largest pkt-line git writes or reads (LARGE_PACKET_MAX), length prefix included.
const maxPkt = 65520

// Command is one ref update of a push.
type Command struct {
	Old, New string // hex object names, all zeros for none
	Ref      string // the full ref name, "refs/heads/main"
}

// Delete reports whether the command deletes its ref (the new object name is all zeros).
func (c Command) Delete() bool { return isZero(c.New) }

// Create reports whether the command creates its ref (the old object name is all zeros).
func (c Command) Create() bool { return isZero(c.Old) && !c.Delete() }

func (c Command) String() string {
	switch {
	case c.Delete():
		return "delete " + c.Ref
	case c.Create():
		return "create " + c.Ref
	}
	return "update " + c.Ref
}

func isZero(oid string) bool { return strings.Trim(oid, "0") == "" }

// Request is the start of a receive-pack request body: everything before the pack.
type Request struct {
	Commands []Command
	// Capabilities are those the client asked for, on any command line (receive-pack reads them
	// from every line that has them).
	Capabilities []string
	// Shallow counts the "shallow" lines (a push from a shallow clone).
	Shallow int
	// PushOptions are the client's push options ("git push -o"), read when it asked for them.
	PushOptions []string
}

// Has reports whether the client asked for capability name (a "name" or "name=value" entry).
func (r *Request) Has(name string) bool {
	for _, c := range r.Capabilities {
		if c == name || strings.HasPrefix(c, name+"=") {
			return true
		}
	}
	return false
}

// Errors of Read. Each refuses the push: the gateway cannot know what receive-pack would do with it.
var (
	ErrTooLarge = fmt.Errorf("the push's ref updates are larger than %d bytes", MaxHead)
	ErrEncoding = errors.New("the push body's Content-Encoding is neither gzip nor identity")
	ErrSigned   = errors.New("signed pushes (push-cert) are not supported by cordon's git rules")
)

// Read parses the commands at the start of a receive-pack request body sent with the given
// Content-Encoding ("", "identity", "gzip" or "x-gzip", in any case; anything else is ErrEncoding). It
// reads no more than it needs and at most MaxHead bytes, and returns the request and a reader that
// yields the body exactly as it came: what Read consumed, then the rest of body.
func Read(body io.Reader, encoding string) (*Request, io.Reader, error) {
	raw := &capped{max: MaxHead}
	tee := io.TeeReader(body, raw)
	var src io.Reader = tee
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(tee)
		if err != nil {
			return nil, nil, fmt.Errorf("the push body is not gzip: %w", refuseTooLarge(err, raw))
		}
		src = zr
	default:
		return nil, nil, ErrEncoding
	}
	req, err := parse(&pktReader{r: src, left: MaxHead})
	if err != nil {
		return nil, nil, refuseTooLarge(err, raw)
	}
	return req, io.MultiReader(bytes.NewReader(raw.buf.Bytes()), body), nil
}

// refuseTooLarge reports ErrTooLarge when the raw bytes ran over the cap, whatever the parser made of
// the truncated input.
func refuseTooLarge(err error, raw *capped) error {
	if raw.over {
		return ErrTooLarge
	}
	return err
}

// capped keeps what is written to it, failing past max bytes.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) > c.max {
		c.over = true
		return 0, ErrTooLarge
	}
	return c.buf.Write(p)
}

// parse reads what receive-pack's read_head_info reads: shallow lines and commands up to a flush,
// then, if asked for, the push options up to a second flush.
func parse(pr *pktReader) (*Request, error) {
	req := &Request{}
	for {
		line, flush, err := pr.next()
		if err != nil {
			return nil, err
		}
		if flush {
			break
		}
		if rest, ok := bytes.CutPrefix(line, []byte("shallow ")); ok && len(line) > 8 {
			if !isOID(string(rest)) {
				return nil, fmt.Errorf("malformed shallow line %q", clip(line))
			}
			req.Shallow++
			continue
		}
		cmd, caps, _ := bytes.Cut(line, []byte{0})
		// receive-pack reads the features as a C string (up to the next NUL) and parse_feature_request
		// separates them by git's isspace (space, tab, LF, CR): split on " " alone, "report-status\tpush-options"
		// would hide push options from the rule that git still reads and the server acts on.
		caps, _, _ = bytes.Cut(caps, []byte{0})
		req.Capabilities = append(req.Capabilities, strings.FieldsFunc(string(caps), gitSpace)...)
		if string(cmd) == "push-cert" {
			return nil, ErrSigned
		}
		c, err := parseCommand(cmd)
		if err != nil {
			return nil, err
		}
		req.Commands = append(req.Commands, c)
	}
	if len(req.Commands) > 0 && req.Has("push-options") {
		for {
			line, flush, err := pr.next()
			if err != nil {
				return nil, fmt.Errorf("reading the push options: %w", err)
			}
			if flush {
				break
			}
			req.PushOptions = append(req.PushOptions, string(line))
		}
	}
	return req, nil
}

// gitSpace is git's isspace (sane_ctype's GIT_SPACE): not \v or \f, unlike unicode.IsSpace.
func gitSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// parseCommand reads "old-oid SP new-oid SP refname", as receive-pack's queue_command: both names of
// the same length (SHA-1 or SHA-256), the ref name the rest of the line.
func parseCommand(line []byte) (Command, error) {
	s := string(line)
	for _, n := range []int{40, 64} {
		if len(s) > 2*n+2 && s[n] == ' ' && s[2*n+1] == ' ' && isOID(s[:n]) && isOID(s[n+1:2*n+1]) {
			return Command{Old: s[:n], New: s[n+1 : 2*n+1], Ref: s[2*n+2:]}, nil
		}
	}
	return Command{}, fmt.Errorf("malformed ref update %q (expected old-oid new-oid refname)", clip(line))
}

func isOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// clip shortens a line for an error message.
func clip(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}

// pktReader reads pkt-lines exactly (never past the line asked for), at most left bytes in all.
type pktReader struct {
	r    io.Reader
	left int
	hdr  [4]byte
}

// next returns one pkt-line's payload without its trailing newline (as receive-pack reads it, with
// PACKET_READ_CHOMP_NEWLINE), or flush. The delimiter and response-end packets of protocol v2, which
// receive-pack does not speak, are errors, as are lengths 1 to 3 and over LARGE_PACKET_MAX.
func (p *pktReader) next() (line []byte, flush bool, err error) {
	if err := p.read(p.hdr[:]); err != nil {
		return nil, false, err
	}
	n, err := strconv.ParseUint(string(p.hdr[:]), 16, 16)
	if err != nil {
		return nil, false, fmt.Errorf("malformed pkt-line length %q", p.hdr[:])
	}
	switch {
	case n == 0:
		return nil, true, nil
	case n < 4:
		return nil, false, fmt.Errorf("unexpected pkt-line %04x (not part of a push)", n)
	case n > maxPkt:
		return nil, false, fmt.Errorf("pkt-line of %d bytes is longer than git allows", n)
	}
	line = make([]byte, n-4)
	if err := p.read(line); err != nil {
		return nil, false, err
	}
	return bytes.TrimSuffix(line, []byte("\n")), false, nil
}

func (p *pktReader) read(b []byte) error {
	if len(b) > p.left {
		return ErrTooLarge
	}
	p.left -= len(b)
	if _, err := io.ReadFull(p.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return errors.New("the push body ends before its ref updates do")
		}
		return err
	}
	return nil
}
