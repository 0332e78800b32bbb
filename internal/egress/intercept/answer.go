package intercept

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/internal/redact"
)

// The answer side of an intercepted exchange: what the upstream sends back on its way to the sandbox,
// searched for the credential values the host was sent.

// releaseDelay is how long after the last bytes of a streamed answer (no Content-Length: chunked,
// server-sent events, a websocket) arrived the tail that the search always holds back goes on to
// the sandbox anyway (redact.Reader): long enough for the parts of a value the upstream writes at
// once, which arrive apart only by the transport's cuts, short enough for an event stream or a
// websocket answering one message at a time. It depends on the clock alone, never on the bytes.
const releaseDelay = 100 * time.Millisecond

// refused1xx is the exchange's refusal once an informational answer's header could not be
// redacted (countingWriter.WriteHeader); modifyResponse then refuses the final answer.
const refused1xx = "answer not searchable for credential values (an informational answer's header)"

func modifyResponse(res *http.Response) error {
	ex := exchangeOf(res.Request.Context())
	if ex != nil {
		ex.status = res.StatusCode
		if ex.refusal == refused1xx {
			return fmt.Errorf("%w, in an informational (1xx) answer", ex.err1xx)
		}
	}
	if ex != nil && ex.spend != nil {
		// Metered beneath everything else: the usage is what the upstream sent.
		ex.spend.meterAnswer(res)
	}
	// A body of known length is read in full chunks (fullReader), which already wait for the
	// bytes whatever they are: its search needs no release, and keeps its copy-free path.
	idle := releaseDelay
	if res.ContentLength > 0 && res.Body != nil {
		res.Body = fullReader{res.Body}
		idle = 0
	}
	if ex != nil && ex.redactions != nil {
		// Listed again now: a concurrent request may have sent this host a value since this one
		// left. (If this one did not ask for an unencoded answer, an encoded one is refused.)
		if red := redact.New(ex.redactions(ex.conn.name)); red != nil {
			if ex.red != nil {
				red.Add(ex.red.Count()) // an informational answer's echoes, already counted
			}
			ex.red = red
			if err := redactResponse(res, red, idle); err != nil {
				return err
			}
			switch b := res.Body.(type) {
			case *redactedBody:
				b.refuse = func(err error) { ex.refusal, ex.err = refusalOf(err), err.Error() }
			case redactedConn:
				b.refuse = ex.frameRefused
				res.Body = b
			}
		}
	}
	return nil
}

// errUnredactable refuses an answer that could carry a credential value in a form the gateway
// cannot search.
var errUnredactable = errors.New("the answer cannot be searched for credential values")

// refusalOf is the audit reason for an answer refused with err, which wraps errUnredactable.
func refusalOf(err error) string {
	if errors.Is(err, errSplitHeader) {
		return "credential value split across header fields"
	}
	return "answer not searchable for credential values"
}

// redactResponse replaces credential values in an answer's header (names and values), body and
// trailer; a body's held-back tail is released idle after it arrived (redact.Reader), or only by
// more bytes or the end if idle is 0. A body in an encoding it cannot search is refused (the
// request asked for none, so a host sending one anyway is not answered); gzip, which some servers
// send regardless, is decoded. So is a header with a value split across its fields.
func redactResponse(res *http.Response, red *redact.Replacer, idle time.Duration) error {
	// The trailer's names are announced in the header (the reverse proxy lists them in Trailer),
	// so they are searched with it; their values come at the end of the body.
	if err := redactHeader(red, res.Header, res.Trailer); err != nil {
		return err
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// A websocket: the upstream's frames are read through the replacer, frame by frame.
		// Frames from a server are not masked and (extensions were not offered) not compressed,
		// so a value is found as sent; a replacement of another length would break the framing.
		rwc, ok := res.Body.(io.ReadWriteCloser)
		if !ok {
			return fmt.Errorf("%w: the protocol switch gave no connection to read", errUnredactable)
		}
		frames, err := red.WebsocketReader(rwc, releaseDelay)
		if err != nil {
			return fmt.Errorf("%w: a protocol switch with a credential value of another length than its placeholder", errUnredactable)
		}
		res.Body = redactedConn{r: frames, ReadWriteCloser: rwc}
		return nil
	}
	if res.Body == nil || res.Body == http.NoBody {
		return nil
	}
	body := io.Reader(res.Body)
	// All the header's values: "gzip" on one line and "br" on another is both, in that order.
	switch ce := strings.ToLower(strings.TrimSpace(strings.Join(res.Header.Values("Content-Encoding"), ","))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			return fmt.Errorf("%w: the gzip body is malformed: %v", errUnredactable, err)
		}
		body = zr
		res.Header.Del("Content-Encoding")
		res.Header.Del("Content-Length")
		res.ContentLength = -1
	default:
		return fmt.Errorf("%w: it is encoded with %q", errUnredactable, ce)
	}
	if !red.SameLength() {
		res.Header.Del("Content-Length")
		res.ContentLength = -1
	}
	header := headerFields(res.Header, nil)
	res.Body = &redactedBody{ReadCloser: red.Reader(body, idle), src: res.Body, atEOF: func() error {
		// The trailer is filled in by the time the body ends; a value split between it and the
		// header counts as split too.
		if err := redactHeader(red, res.Trailer, nil); err != nil {
			return err
		}
		if red.Assembled(headerFields(res.Trailer, header)) {
			return fmt.Errorf("%w: %w (header and trailer)", errUnredactable, errSplitHeader)
		}
		return nil
	}}
	return nil
}

// redactedBody is a response body read through a replacer; at its end it redacts the trailer too,
// and ends with an error instead of io.EOF if the trailer cannot be (the answer is then cut off:
// its header and body have gone, and the sandbox never reads the trailer).
type redactedBody struct {
	io.ReadCloser           // the replacer's reader
	src           io.Closer // the upstream's body
	atEOF         func() error
	refuse        func(error) // records a refusal at the end, if set
	once          sync.Once
	err           error
}

func (b *redactedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() {
			if b.err = b.atEOF(); b.err != nil && b.refuse != nil {
				b.refuse(b.err)
			}
		})
		if b.err != nil {
			err = b.err
		}
	}
	return n, err
}

// Close closes the upstream's body, which ends the replacer's read of it, and then the replacer.
func (b *redactedBody) Close() error {
	err := b.src.Close()
	b.ReadCloser.Close()
	return err
}

// redactedConn is an upgraded upstream connection whose reads go through a replacer.
type redactedConn struct {
	r io.ReadCloser
	io.ReadWriteCloser
	refuse func(reason string) // told when a frame is refused, if set
}

// Read reads the searched frames. A frame the replacer cannot search ends them with an error,
// which ends the relay and closes the connection; refuse is told why.
func (c redactedConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && c.refuse != nil && errors.Is(err, redact.ErrWebsocketFrame) {
		c.refuse("websocket frame refused: " + strings.TrimPrefix(err.Error(), redact.ErrWebsocketFrame.Error()+": "))
	}
	return n, err
}

// Close closes the connection, which ends the replacer's read of it, and then the replacer.
func (c redactedConn) Close() error {
	err := c.ReadWriteCloser.Close()
	c.r.Close()
	return err
}

// countingWriter counts the body bytes sent to the client and remembers the status. Unwrap lets
// http.ResponseController reach Flush and Hijack underneath.
type countingWriter struct {
	http.ResponseWriter
	ex     *exchange
	n      int64
	status int
}

func (w *countingWriter) WriteHeader(code int) {
	if code < 200 && w.ex.red != nil {
		// An informational answer (103 Early Hints) is relayed by the reverse proxy straight from
		// the upstream, before ModifyResponse sees anything: its header is searched here. One that
		// cannot be redacted is not relayed, and the final answer is refused (modifyResponse).
		if err := redactHeader(w.ex.red, w.Header(), nil); err != nil {
			w.ex.refusal, w.ex.err, w.ex.err1xx = refused1xx, err.Error(), err
			return // the reverse proxy clears the header it filled
		}
	}
	if w.status == 0 || w.status < 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
