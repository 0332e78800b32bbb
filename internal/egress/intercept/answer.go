package intercept

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/redact"
)

// The answer side of an intercepted exchange: what the upstream sends back on its way to the sandbox,
// searched for the credential values the host was sent.

func modifyResponse(res *http.Response) error {
	ex := exchangeOf(res.Request.Context())
	if ex != nil {
		ex.status = res.StatusCode
	}
	if res.ContentLength > 0 && res.Body != nil {
		res.Body = fullReader{res.Body}
	}
	if ex != nil && ex.redactions != nil {
		// Listed again now: a concurrent request may have sent this host a value since this one
		// left. (If this one did not ask for an unencoded answer, an encoded one is refused.)
		if red := redact.New(ex.redactions(ex.conn.name)); red != nil {
			if ex.red != nil {
				red.Add(ex.red.Count()) // an informational answer's echoes, already counted
			}
			ex.red = red
			return redactResponse(res, red)
		}
	}
	return nil
}

// errUnredactable refuses an answer that could carry a credential value in a form the gateway
// cannot search.
var errUnredactable = errors.New("the answer cannot be searched for credential values")

// redactResponse replaces credential values in an answer's header, body and trailer. A body in an
// encoding it cannot search is refused (the request asked for none, so a host sending one anyway
// is not answered); gzip, which some servers send regardless, is decoded.
func redactResponse(res *http.Response, red *redact.Replacer) error {
	for _, vs := range res.Header {
		red.Strings(vs)
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// A websocket: the upstream's frames are read through the replacer. Frames from a server
		// are not masked and (extensions were not offered) not compressed, so a value is found as
		// sent; a replacement of another length would break the framing.
		rwc, ok := res.Body.(io.ReadWriteCloser)
		if !ok {
			return fmt.Errorf("%w: the protocol switch gave no connection to read", errUnredactable)
		}
		if !red.SameLength() {
			return fmt.Errorf("%w: a protocol switch with a credential value of another length than its placeholder", errUnredactable)
		}
		res.Body = redactedConn{Reader: red.Reader(rwc), ReadWriteCloser: rwc}
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
	res.Body = &redactedBody{Reader: red.Reader(body), Closer: res.Body, atEOF: func() {
		for _, vs := range res.Trailer { // filled in by the time the body ends
			red.Strings(vs)
		}
	}}
	return nil
}

// redactedBody is a response body read through a replacer; at its end it redacts the trailer too.
type redactedBody struct {
	io.Reader
	io.Closer
	atEOF func()
	once  sync.Once
}

func (b *redactedBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.once.Do(b.atEOF)
	}
	return n, err
}

// redactedConn is an upgraded upstream connection whose reads go through a replacer.
type redactedConn struct {
	io.Reader
	io.ReadWriteCloser
}

func (c redactedConn) Read(p []byte) (int, error) { return c.Reader.Read(p) }

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
		// the upstream, before ModifyResponse sees anything: its header is searched here.
		for _, vs := range w.Header() {
			w.ex.red.Strings(vs)
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
