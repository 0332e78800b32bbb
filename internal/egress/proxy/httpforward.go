package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/egress/proxy/http1"
)

// reasonBodyOnSafe refuses a request whose method has no body to speak of but whose framing
// announces one: a server that ignores such a body (many do) reads it as the next request, one the
// gateway never judged (CL.0 request smuggling).
const reasonBodyOnSafe = "a body on GET, HEAD, OPTIONS or DELETE (a server that ignores it would read it as another request)"

// bodyRefused reports a request whose body the gateway will not forward (see reasonBodyOnSafe).
func bodyRefused(r *http1.Request) bool {
	switch r.Method {
	case "GET", "HEAD", "OPTIONS", "DELETE":
		return r.HasBody()
	}
	return false
}

// dropped are the client's fields the gateway never forwards: hop-by-hop ones (RFC 9110 section
// 7.6.1) and the framing, which the gateway writes itself from what it read.
var dropped = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true, "trailer": true,
	"upgrade": true, "content-length": true, "transfer-encoding": true, "host": true,
}

// upstreamHead is req's head as the gateway sends it upstream, written from its parsed form, never
// from the client's bytes: the request line in origin form, Host first (host, as judged), the client's
// other fields but the dropped ones (and those in also), then the framing of the body the gateway
// forwards and "Connection: close" if closing.
func upstreamHead(req *http1.Request, host string, closing bool, also ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\nHost: %s\r\n", req.Method, req.PathQuery, req.Version, host)
fields:
	for _, f := range req.Fields {
		name := strings.ToLower(f.Name)
		if dropped[name] {
			continue
		}
		for _, a := range also {
			if name == a {
				continue fields
			}
		}
		fmt.Fprintf(&b, "%s: %s\r\n", f.Name, f.Value)
	}
	switch {
	case req.Chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n")
	case req.ContentLength >= 0:
		fmt.Fprintf(&b, "Content-Length: %d\r\n", req.ContentLength)
	}
	switch {
	case closing:
		b.WriteString("Connection: close\r\n")
	case req.Version == "HTTP/1.0":
		b.WriteString("Connection: keep-alive\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// copyBody forwards req's body from br to up by the framing the gateway read: Content-Length bytes
// as they are, a chunked body decoded strictly and re-encoded (see http1.CopyChunked).
func (s *session) copyBody(up net.Conn, br *bufio.Reader, req *http1.Request) (int64, error) {
	switch {
	case req.Chunked:
		buf := s.g.bufs.get(false)
		defer s.g.bufs.put(buf)
		return http1.CopyChunked(up, br, buf)
	case req.ContentLength > 0:
		buffered := min(int64(br.Buffered()), req.ContentLength)
		n, err := io.CopyN(up, br, buffered)
		if err != nil {
			return n, err
		}
		m, err := s.g.bufs.relayN(up, s.client, req.ContentLength-n)
		return n + m, unexpected(err)
	}
	return 0, nil
}

// serveHTTP forwards plain-HTTP requests from the client (br) to up, one at a time, the first one
// already read and judged: each later request on the kept-alive connection is read by the strict
// parser and judged like the first (so it cannot name another host, CONNECT or upgrade), a body on
// GET, HEAD, OPTIONS or DELETE is refused, and each goes upstream re-written from its parsed form
// (upstreamHead, copyBody): a server can only read the requests the gateway read. Each response is
// relayed whole before the next request is read, so a refusal can be answered with a status line.
// It ends the connection itself; the event counts the requests.
func (s *session) serveHTTP(br *bufio.Reader, up net.Conn, req *http1.Request, name string, port uint16) {
	c := s.client
	ubr := bufio.NewReaderSize(up, sniffBuffer)
	for n := 1; ; n++ {
		s.detail("requests", strconv.Itoa(n))
		if n > 1 {
			if reason := checkRequest(req, name, port); reason != "" {
				s.detail("refused_request", truncate(req.Method+" "+req.Host.String()+req.Path, 200))
				s.httpDeny(refuse(reason), 403, name, port)
				return
			}
		}
		if bodyRefused(req) {
			if n > 1 {
				s.detail("refused_request", truncate(req.Method+" "+req.Host.String()+req.Path, 200))
			}
			s.httpDeny(refuse(reasonBodyOnSafe), 400, name, port)
			return
		}
		keep, answered, err := s.exchange(br, up, ubr, req, req.Host.String())
		if err != nil {
			switch {
			case errors.Is(err, errMalformed):
				s.detail("error", "request body: "+err.Error())
				if !answered {
					s.httpDeny(refuse(reasonBadRequest), 400, name, port)
					return
				}
				s.decided(refuse(reasonBadRequest))
			case !answered && n == 1:
				s.detail("error", err.Error())
				writeStatus(c, 502, fmt.Sprintf("cordon: bad response from %s:%d\n", name, port))
				lingeringClose(c)
				return
			case !answered:
				// The upstream closed a kept-alive connection before answering: close the client's
				// the same way, so it retries on a new one as it would with the server itself.
				lingeringClose(c)
				return
			default:
				s.detail("error", err.Error())
			}
			reset(c)
			return
		}
		if !keep {
			lingeringClose(c)
			return
		}
		raw, err := readHead(br, maxHead)
		if errors.Is(err, io.EOF) {
			return // the client is done
		}
		if err != nil && !errors.Is(err, errMalformed) {
			// The connection failed before a whole head arrived: nothing of it was forwarded.
			s.detail("error", fmt.Sprintf("waiting for request %d: %v", n+1, err))
			return
		}
		if err == nil {
			req, err = parseRequest(raw)
		}
		if err != nil {
			s.detail("error", fmt.Sprintf("request %d: %v", n+1, err))
			s.httpDeny(refuse(reasonBadRequest), 400, name, port)
			return
		}
	}
}

// bodyGrace is how long a final response that came before the request body was all sent waits for
// the copy to finish, so that the connection can be kept: it only decides keep-alive, never what
// is sent.
const bodyGrace = 250 * time.Millisecond

// exchange sends one request upstream and relays its response. keep says the connection may carry
// another request; answered, that the client got some of a response (so it can no longer be told
// anything else). An error wrapping errMalformed is the client's body.
func (s *session) exchange(br *bufio.Reader, up net.Conn, ubr *bufio.Reader, req *http1.Request, host string) (keep, answered bool, err error) {
	n, err := io.WriteString(up, upstreamHead(req, host, req.Close))
	s.ev.BytesOut += int64(n)
	if err != nil {
		return false, false, fmt.Errorf("to upstream: %w", err)
	}
	type result struct {
		n   int64
		err error
	}
	bodyDone := make(chan struct{})
	sent := make(chan result, 1)
	if req.HasBody() {
		go func() {
			n, err := s.copyBody(up, br, req)
			close(bodyDone)
			if err != nil {
				up.Close() // the upstream never gets the rest; the answer reader stops
			}
			sent <- result{n, err}
		}()
	} else {
		close(bodyDone)
		sent <- result{}
	}
	// A response that arrives before the request's body is all sent ends the connection: the rest of
	// the body cannot be read by its framing while the next request waits. An upstream that read the
	// whole body can answer before the copy has noticed it is done, so the copy is given a moment.
	closing := func() bool {
		if req.Close {
			return true
		}
		t := time.NewTimer(bodyGrace)
		defer t.Stop()
		select {
		case <-bodyDone:
			return false
		case <-t.C:
			return true
		}
	}
	in, keep, rerr := relayKeepAlive(&s.g.bufs, s.client, up, ubr, req.Method, closing)
	s.ev.BytesIn += in
	if !keep || rerr != nil {
		_ = s.client.SetReadDeadline(time.Now()) // stop a body still flowing
		up.Close()
	}
	r := <-sent
	_ = s.client.SetReadDeadline(time.Time{})
	s.ev.BytesOut += r.n
	if r.err != nil && errors.Is(r.err, errMalformed) {
		return false, in > 0, r.err
	}
	if rerr != nil {
		return false, in > 0, fmt.Errorf("response: %w", rerr)
	}
	if r.err != nil && keep {
		return false, true, fmt.Errorf("from client: %w", r.err)
	}
	return keep, true, nil
}

// relayKeepAlive copies one response from the upstream to the client: interim 1xx responses as they
// are, then the final one, its body by its framing. It keeps the connection (keep) unless closing
// says so when the final head is written, the upstream closes after it, or its body runs to the end
// of the stream; then the head the client gets says "Connection: close".
func relayKeepAlive(bufs *bufferPool, c net.Conn, up net.Conn, ubr *bufio.Reader, method string, closing func() bool) (total int64, keep bool, err error) {
	for {
		raw, err := readHead(ubr, maxHead)
		if err != nil {
			return total, false, err
		}
		resp, err := parseResponse(raw)
		if err != nil {
			return total, false, err
		}
		if resp.status == 101 {
			return total, false, fmt.Errorf("upgrade the gateway did not ask for: %w", errMalformed)
		}
		if resp.status/100 == 1 {
			n, err := c.Write(raw)
			total += int64(n)
			if err != nil {
				return total, false, err
			}
			continue
		}
		bodyless := resp.bodyless(method)
		keep = !closing() && !resp.closes() && (bodyless || resp.chunked || resp.contentLength >= 0)
		head := raw
		if !keep {
			head = []byte(closingHead(raw, resp))
		}
		// The head goes out with whatever of the body is already read, in one write: a client that
		// reads a small answer with one recv() gets all of it, as it would from the server.
		var pre []byte
		left := resp.contentLength
		switch {
		case bodyless || resp.chunked:
		case left >= 0:
			pre, _ = ubr.Peek(int(min(int64(ubr.Buffered()), left)))
			left -= int64(len(pre))
		default:
			pre, _ = ubr.Peek(ubr.Buffered())
		}
		n, err := c.Write(append(head[:len(head):len(head)], pre...))
		total += int64(n)
		_, _ = ubr.Discard(len(pre))
		if err != nil {
			return total, false, err
		}
		var m int64
		switch {
		case bodyless:
		case resp.chunked:
			m, err = copyChunked(c, ubr)
		case left == 0:
		default:
			m, err = copyRest(bufs, c, ubr, up, left)
		}
		return total + m, keep && err == nil, err
	}
}
