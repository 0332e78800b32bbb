package intercept

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// A websocket to a host with credentials is relayed message by message: the gateway is a websocket
// server to the sandbox and a client to the upstream (github.com/coder/websocket on both sides), so
// a placeholder in a message the sandbox sends becomes the real value (where the credential allows
// the body), a value the upstream echoes becomes the placeholder again, and each message is written
// anew with its own length: a value and its placeholder need not be as long as each other, as they
// must when frames are relayed as they are (redact.WebsocketReader).

// maxMessage bounds one websocket message the relay holds in memory, either way; a larger one
// closes the connection with 1009 (message too big).
const maxMessage = 16 << 20

// wsAnswerOwn are the header fields of a 101 answer the websocket library writes itself (or that
// describe the upstream's side of the connection only): they are not copied from the upstream's.
var wsAnswerOwn = []string{"Upgrade", "Connection", "Sec-Websocket-Accept", "Sec-Websocket-Protocol", "Sec-Websocket-Extensions", "Content-Length", "Transfer-Encoding"}

// wsRequestSkip are the header fields of the sandbox's handshake not sent upstream as they are: the
// library makes its own handshake (key, version, no extensions), asks for the subprotocols itself,
// and Host is the connection's.
var wsRequestSkip = []string{"Host", "Upgrade", "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Proxy-Connection", "Proxy-Authorization",
	"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol"}

// relaysMessages reports whether the websocket request of ex to name is relayed message by message:
// when a value sent to the host is not as long as its placeholder (frames relayed as they are could
// not carry the replacement), or when a credential bound to the host may go into its messages
// (Config.MessagesFor). Otherwise frames are relayed as they are, searched by
// redact.WebsocketReader, which keeps them intact. A metered request keeps the reverse proxy's path,
// which meters the answer.
func (i *Interceptor) relaysMessages(name string, ex *exchange) bool {
	if ex.spend != nil || i.modifyMessage == nil && ex.red == nil {
		return false
	}
	return !ex.red.SameLength() || i.modifyMessage != nil && i.messagesFor != nil && i.messagesFor(name)
}

// errNotSwitched is what the upgrade's transport returns when the upstream answered other than 101:
// the answer is kept (upgradeTransport.other) and relayed as any answer.
var errNotSwitched = errors.New("the upstream did not switch protocols")

// upgradeTransport sends the handshake through the interceptor's HTTP/1.1 transport (verified TLS,
// the gateway's checked dialer) and keeps an answer other than 101 for the sandbox.
type upgradeTransport struct {
	rt    http.RoundTripper
	other *http.Response
}

func (t *upgradeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := t.rt.RoundTrip(r)
	if err == nil && res.StatusCode != http.StatusSwitchingProtocols {
		t.other = res
		return nil, errNotSwitched
	}
	return res, err
}

// serveWebsocket relays one websocket handshake and, once the upstream switched, its messages, until
// either side closes. ev is the request's audit event, recorded by the caller when this returns.
func (i *Interceptor) serveWebsocket(cw *countingWriter, r *http.Request, ex *exchange, ev *audit.Event) {
	c := ex.conn
	ctx := r.Context()
	if err := checkWebsocket(r); err != nil {
		ex.status, ev.Decision, ev.Rule, ev.Reason = http.StatusBadRequest, audit.Deny, gatewayRule, "malformed websocket handshake: "+err.Error()
		writeDenial(cw, r, c, r.URL.EscapedPath(), http.StatusBadRequest, ev.Reason, "")
		return
	}
	header := r.Header.Clone()
	for _, k := range wsRequestSkip {
		header.Del(k)
	}
	var protos []string
	for _, v := range r.Header.Values("Sec-Websocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				protos = append(protos, p)
			}
		}
	}
	scheme := "wss"
	if c.scheme == "http" {
		scheme = "ws"
	}
	target := scheme + "://" + c.upstream() + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	tr := &upgradeTransport{rt: i.tr1}
	up, res, err := websocket.Dial(ctx, target, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		HTTPHeader: header, Host: r.Host, Subprotocols: protos, CompressionMode: websocket.CompressionDisabled,
	})
	if tr.other != nil {
		// Not switched (401, 404, a redirect): an answer like any other, searched and relayed.
		i.relayAnswer(cw, tr.other)
		return
	}
	if err != nil {
		if res != nil && res.Body != nil {
			res.Body.Close()
		}
		i.errorHandler(cw, r.WithContext(ctx), err)
		return
	}
	defer up.CloseNow()
	ex.status = http.StatusSwitchingProtocols
	// The 101's header fields, searched for values as any answer's (the upstream saw the real ones).
	if err := redactHeader(ex.red, res.Header, nil); err != nil {
		ex.refusal, ex.err = refusalOf(err), err.Error()
		ex.status = http.StatusBadGateway
		writeDenial(cw, r, c, r.URL.EscapedPath(), http.StatusBadGateway, "cordon refused the upstream's answer: "+err.Error(), "")
		return
	}
	h := cw.Header()
	for k, vs := range res.Header {
		h[k] = vs
	}
	for _, k := range wsAnswerOwn {
		h.Del(k)
	}
	var chosen []string
	if p := up.Subprotocol(); p != "" {
		chosen = []string{p}
	}
	// The origin was the upstream's to judge (it saw the sandbox's Origin); the sandbox's side is
	// the gateway's own connection.
	// From the 101 on the client sends websocket frames, which the framing gate must not read as a
	// request (the hijack ends the hold; a switch that failed, release).
	c.gate.holdUpgrade()
	down, err := websocket.Accept(cw, r, &websocket.AcceptOptions{InsecureSkipVerify: true, Subprotocols: chosen, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		c.gate.release()
		ex.err = "websocket with the sandbox: " + err.Error()
		return
	}
	defer down.CloseNow()
	up.SetReadLimit(maxMessage)
	down.SetReadLimit(maxMessage)
	cw.n += i.relayMessages(ctx, down, up, ex, ev)
}

// relayAnswer writes an upstream's answer to a handshake that did not switch as the reverse proxy
// would: searched for values (modifyResponse), header then body.
func (i *Interceptor) relayAnswer(cw *countingWriter, res *http.Response) {
	defer res.Body.Close()
	if err := modifyResponse(res); err != nil {
		i.errorHandler(cw, res.Request, err)
		return
	}
	h := cw.Header()
	for k, vs := range res.Header {
		h[k] = vs
	}
	// Hop-by-hop fields are the upstream connection's; a body redacted to another length has none.
	for _, k := range []string{"Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Proxy-Connection", "Te", "Trailer"} {
		h.Del(k)
	}
	if res.ContentLength < 0 {
		h.Del("Content-Length")
	}
	cw.WriteHeader(res.StatusCode)
	_, _ = io.Copy(cw, res.Body)
}

// relayMessages copies messages both ways until either side ends: the sandbox's through
// Config.ModifyMessage, the upstream's through the replacer of the values sent to the host (made
// anew once a message carried one). A close is passed on with its code and its reason (searched too).
// It returns the payload bytes written to the sandbox.
func (i *Interceptor) relayMessages(ctx context.Context, down, up *websocket.Conn, ex *exchange, ev *audit.Event) int64 {
	name := ex.conn.name
	var (
		mu       sync.Mutex // guards injected and misuse
		injected = map[string]bool{}
		misuse   = map[string]bool{}
		fresh    atomic.Bool // a message carried a value: the replacer must list it
		sent     atomic.Int64
		received atomic.Int64
		bytesIn  atomic.Int64
	)
	var refused sync.Once // either direction may refuse; the first reason is the one recorded
	refuse := func(conn *websocket.Conn, reason string) {
		refused.Do(func() { ex.refusal = reason })
		_ = conn.Close(websocket.StatusPolicyViolation, "cordon: "+reason)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the sandbox to the upstream
		defer wg.Done()
		defer up.CloseNow()
		for {
			typ, msg, err := down.Read(ctx)
			if err != nil {
				passClose(up, err, nil)
				return
			}
			if i.modifyMessage != nil {
				out, in, mis, err := i.modifyMessage(ctx, name, msg)
				if err != nil {
					refuse(down, "a message could not be given its credential: "+err.Error())
					return
				}
				if ex.conn.scheme != "https" && len(in) > 0 {
					refuse(down, "a credential in a message to a plain-HTTP upstream")
					return
				}
				mu.Lock()
				for _, n := range in {
					injected[n] = true
				}
				for _, n := range mis {
					misuse[n] = true
				}
				mu.Unlock()
				if len(in) > 0 {
					fresh.Store(true)
				}
				msg = out
			}
			if err := up.Write(ctx, typ, msg); err != nil {
				down.CloseNow()
				return
			}
			sent.Add(1)
		}
	}()
	go func() { // the upstream to the sandbox
		defer wg.Done()
		defer down.CloseNow()
		type message struct {
			typ  websocket.MessageType
			data []byte
			err  error
		}
		in := make(chan message)
		go func() {
			for {
				typ, data, err := up.Read(ctx)
				select {
				case in <- message{typ, data, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		// The newest message is held until the next arrives or releaseDelay has passed, whatever
		// it holds, and an older one until the messages after it hold at least Hold bytes: a value
		// the upstream split between messages (two, or a stream of short ones) is then refused
		// before its first part reached the sandbox, and when a message is released depends on
		// lengths and time alone, never on its bytes.
		var queue []message
		queued := 0 // bytes in queue
		// queuedTail is the last h bytes of the held messages, joined: all that a value going on
		// past them can have begun in (only this much is copied, not a message of up to maxMessage).
		queuedTail := func(h int) []byte {
			var tail []byte
			for j := len(queue) - 1; j >= 0 && len(tail) < h; j-- {
				d := queue[j].data
				d = d[max(0, len(d)-(h-len(tail))):]
				tail = append(append(make([]byte, 0, len(d)+len(tail)), d...), tail...)
			}
			return tail
		}
		release := time.NewTimer(time.Hour)
		release.Stop()
		write := func(m message) bool {
			if err := down.Write(ctx, m.typ, m.data); err != nil {
				up.CloseNow()
				return false
			}
			received.Add(1)
			bytesIn.Add(int64(len(m.data)))
			return true
		}
		flush := func() bool {
			for len(queue) > 0 {
				if !write(queue[0]) {
					return false
				}
				queued -= len(queue[0].data)
				queue = queue[1:]
			}
			return true
		}
		for {
			select {
			case <-release.C:
				if !flush() {
					return
				}
				continue
			case m := <-in:
				if fresh.Swap(false) && i.redactions != nil {
					// Listed again: the sandbox's messages sent values the replacer did not know.
					red := redact.New(i.redactions(name))
					if ex.red != nil {
						red.Add(ex.red.Count())
					}
					ex.red = red
					queued = 0
					for j := range queue {
						queue[j].data = red.Bytes(queue[j].data)
						queued += len(queue[j].data)
					}
				}
				if m.err != nil {
					var ce websocket.CloseError
					if errors.As(m.err, &ce) && len(queue) > 0 {
						if ex.red.Spans(queuedTail(ex.red.Hold()), []byte(ce.Reason)) {
							refuse(down, "a credential value split between a websocket message and the close reason")
							return
						}
					}
					if !flush() {
						return
					}
					if isFrameError(m.err) {
						ex.frameRefused("websocket frame refused: " + m.err.Error())
					}
					passClose(down, m.err, ex.red)
					return
				}
				m.data = ex.red.Bytes(m.data)
				if len(queue) > 0 {
					release.Stop()
					if ex.red.Spans(queuedTail(ex.red.Hold()), m.data) {
						refuse(down, "a credential value split between websocket messages")
						return
					}
				}
				queue = append(queue, m)
				queued += len(m.data)
				// Release the oldest while what follows it could hold the rest of any value
				// that begins in it; the newest waits for the next message or the timer.
				for len(queue) > 1 && queued-len(queue[0].data) >= ex.red.Hold() {
					if !write(queue[0]) {
						return
					}
					queued -= len(queue[0].data)
					queue = queue[1:]
				}
				release.Reset(releaseDelay)
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if names := join(injected); names != "" {
		if had := ev.Detail[audit.DetailCredentials]; had != "" {
			names = join(merge(injected, strings.Split(had, ",")))
		}
		ev.Detail[audit.DetailCredentials] = names
	}
	if names := join(misuse); names != "" {
		ev.Detail[audit.DetailCredentialMisuse] = strings.TrimPrefix(ev.Detail[audit.DetailCredentialMisuse]+"; ", "; ") + names + " in a websocket message"
	}
	ev.Detail["websocket_messages"] = fmt.Sprintf("%d sent, %d received", sent.Load(), received.Load())
	return bytesIn.Load()
}

// passClose ends to the way the other side ended: its close code and reason (the reason searched
// with red, which may be nil), or at once when it went away without one.
func passClose(to *websocket.Conn, err error, red *redact.Replacer) {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		code := ce.Code
		if code == websocket.StatusNoStatusRcvd || code == websocket.StatusAbnormalClosure || code == websocket.StatusTLSHandshake {
			code = websocket.StatusNormalClosure // codes a close frame may not carry
		}
		_ = to.Close(code, red.String(ce.Reason))
		return
	}
	if errors.Is(err, websocket.ErrMessageTooBig) {
		_ = to.Close(websocket.StatusMessageTooBig, "message too big")
		return
	}
	to.CloseNow()
}

// isFrameError reports whether err ended a websocket read because of what the upstream sent (a
// frame the protocol forbids: masked, reserved bits, a bad length) rather than a close or the
// connection going away.
func isFrameError(err error) bool {
	var ce websocket.CloseError
	if errors.As(err, &ce) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, io.ErrUnexpectedEOF) {
		return false
	}
	return strings.Contains(err.Error(), "protocol") || strings.Contains(err.Error(), "frame")
}

func join(set map[string]bool) string {
	return strings.Join(slices.Sorted(maps.Keys(set)), ",")
}

func merge(set map[string]bool, more []string) map[string]bool {
	for _, m := range more {
		if m != "" {
			set[m] = true
		}
	}
	return set
}
