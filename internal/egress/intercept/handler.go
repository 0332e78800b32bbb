package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/budget"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// exchange is one request's state, shared with the reverse proxy's hooks through the context.
type exchange struct {
	conn    *conn
	status  int    // the upstream's status, or ours
	err     string // why the upstream could not be reached
	refusal string // why the gateway refused the upstream's answer (its certificate, an encoding)
	err1xx  error  // why an informational answer's header could not be redacted (refused1xx)
	h2      bool   // the client spoke HTTP/2
	// red replaces the credential values the host has been sent in its answers (Config.Redactions);
	// redactions lists them.
	red        *redact.Replacer
	redactions func(string) []redact.Pair
	// frameRefusal is why the answer redactor refused a websocket frame from the upstream (and so
	// closed the connection), set once by the frame reader on the reverse proxy's copy goroutine;
	// refuseFrame records it (frameRefused).
	frameRefusal atomic.Pointer[string]
	refuseFrame  func(reason string)
	// spend meters the request against its host's budget (budget.go); nil when it has none.
	spend *spend
	// sent is set once the request's head was written to the upstream (httptrace WroteHeaders):
	// only then did a credential the hook put into it leave the gateway.
	sent atomic.Bool
}

// frameRefused records, once, that a websocket frame from the upstream was refused: as an audit
// event of its own, since it happens while the connection is relayed, after the request was
// judged (and, should the other direction end first, after its event was recorded). The request
// so has two events, the allowed upgrade and this refusal.
func (ex *exchange) frameRefused(reason string) {
	if ex.frameRefusal.CompareAndSwap(nil, &reason) && ex.refuseFrame != nil {
		ex.refuseFrame(reason)
	}
}

type exchangeKey struct{}

func exchangeOf(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// handle judges one request and forwards it if allowed, recording one audit event either way.
func (i *Interceptor) handle(c *conn, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ex := &exchange{conn: c, h2: r.ProtoMajor == 2}
	target, originOK := originForm(r.RequestURI, c)
	logged, _, _ := strings.Cut(target, "?") // the query may carry secrets: never recorded
	ev := audit.Event{
		Time: start, Kind: audit.KindHTTP, Name: c.name, Port: c.port, Decision: audit.Deny,
		Detail: map[string]string{"method": r.Method, "path": logged, "proto": r.Proto},
	}
	cw := &countingWriter{ResponseWriter: w, ex: ex}
	var body *countingBody
	defer func() {
		if ex.status == 0 {
			ex.status = cw.status
		}
		ev.Detail["status"] = strconv.Itoa(ex.status)
		if ex.err != "" {
			ev.Detail["error"] = ex.err
		}
		if ex.refusal != "" {
			ev.Decision, ev.Rule, ev.Reason = audit.Deny, gatewayRule, ex.refusal
		}
		if names := ev.Detail[audit.DetailCredentials]; names != "" && !ex.sent.Load() {
			// The summary counts credentials that reached an upstream, not ones the hook put into a
			// request that was then refused or failed before it was written.
			delete(ev.Detail, audit.DetailCredentials)
			ev.Detail[audit.DetailCredentialsUnsent] = names
		}
		if n := ex.red.Count(); n > 0 {
			ev.Detail[audit.DetailCredentialEchoed] = strconv.FormatInt(n, 10)
		}
		if body != nil {
			ev.BytesOut = body.n.Load()
		}
		if ex.spend != nil {
			recordBudget(&ev, ex.spend)
		}
		ev.BytesIn = cw.n
		ev.Duration = time.Since(start)
		i.rec.Record(ev)
	}()
	refuse := func(status int, rule, reason, fix string, write func()) {
		ev.Rule, ev.Reason = rule, reason
		ex.status = status
		write()
		if i.notify != nil {
			line := fmt.Sprintf("blocked %s %s://%s%s (%s)", r.Method, c.scheme, c.upstream(), logged, reason)
			if fix != "" {
				line += " — to allow: " + fix
			}
			i.notify(c.name+" "+r.Method+" "+rule, line)
		}
	}
	deny := func(status int, rule, reason, fix string) {
		refuse(status, rule, reason, fix, func() { writeDenial(cw, r, c, logged, status, reason, fix) })
	}

	if !authorityMatches(r.Host, c) || !hostHeadersMatch(r.Header.Values("Host"), c) {
		ev.Detail["host"] = r.Host
		deny(http.StatusMisdirectedRequest, gatewayRule, "Host does not match the connection's name", "")
		return
	}
	if r.Method == http.MethodConnect {
		deny(http.StatusMethodNotAllowed, gatewayRule, "CONNECT inside an intercepted connection", "")
		return
	}
	if !originOK {
		deny(http.StatusBadRequest, gatewayRule, errNotOrigin.Error(), "")
		return
	}
	up := upgradeOf(r.Header)
	if up != "" && !strings.EqualFold(up, "websocket") {
		// After a 101 the connection is a tunnel the rules no longer see; an upgrade to h2c, say,
		// would carry requests for any path. Websockets are the one upgrade relayed.
		deny(http.StatusForbidden, gatewayRule, fmt.Sprintf("upgrade to %q is not relayed (only websocket)", up), "")
		return
	}
	judged := false // a git rule allowed the request, so the HTTP rules are not asked
	if g := i.gitFor(c.name); g != nil {
		extra := up != "" || len(overridesOf(r.Header)) > 0 || bodyless(r.Method) && hasBody(r)
		gv := i.judgeGit(g, r, target, extra)
		for k, v := range gv.details {
			ev.Detail[k] = v
		}
		switch gv.outcome {
		case gitDeny:
			if gv.message != "" {
				gv.reason = strings.TrimSpace(gv.reason)
			}
			deny(gv.status, gv.rule, gv.reason, gv.fix)
			return
		case gitRefuse:
			refuse(gv.status, gv.rule, gv.reason, gv.fix, func() { writeGitRefusal(cw, r, gv.body) })
			return
		case gitAllow:
			judged = true
			ev.Rule = gv.rule
		}
	}
	var x extras
	switch {
	case judged:
	case i.rules.covers(c.name):
		// What a rule must allow besides the method and path (request_checks.go).
		if up != "" {
			if err := checkWebsocket(r); err != nil {
				deny(http.StatusBadRequest, gatewayRule, "malformed websocket handshake: "+err.Error(), "")
				return
			}
			x.websocket = true
		}
		x.overrides = overridesOf(r.Header)
		x.body = bodyless(r.Method) && hasBody(r)
	case bodyless(r.Method) && hasBody(r):
		// A host intercepted for a credential or inspection has no rule that could allow it: a
		// body on a bodyless method is what an upstream that ignores it reads as a second request
		// (and a body credential would be put into it), as the plain-HTTP forwarder refuses too.
		deny(http.StatusBadRequest, gatewayRule, fmt.Sprintf("a body on %s is refused (an upstream may read it as another request)", r.Method), "")
		return
	}
	if !judged {
		v := i.rules.judgeExtras(c.name, r.Method, target, x)
		if !v.allow {
			deny(http.StatusForbidden, v.rule, v.reason, v.fix)
			return
		}
		ev.Rule = v.rule
	}
	if i.modify != nil {
		judged := r.URL.EscapedPath()
		// The hook reads how the request goes upstream from its URL: "https" is TLS verified against
		// the Roots, the only way a credential may be sent; "http" is cleartext.
		r.URL.Scheme, r.URL.Host = c.scheme, c.upstream()
		details, err := i.modify(r, c.name)
		for k, val := range details {
			if _, taken := ev.Detail[k]; !taken {
				ev.Detail[k] = val
			}
		}
		if err != nil {
			deny(http.StatusForbidden, gatewayRule, "request refused while adding credentials: "+err.Error(), "")
			return
		}
		if !authorityMatches(r.Host, c) || r.URL.EscapedPath() != judged {
			deny(http.StatusBadGateway, gatewayRule, "the credential hook changed the request's Host or path", "")
			return
		}
		if c.scheme != "https" && details[audit.DetailCredentials] != "" {
			// Fail closed should a hook put a credential into a request that would go out in cleartext.
			deny(http.StatusBadGateway, gatewayRule, "the credential hook put a credential into a plain-HTTP request", "")
			return
		}
	}
	spend, api, err := i.admit(r, c.name)
	if err != nil {
		ev.Rule, ev.Reason = budgetRefusal(err), err.Error()
		ex.status = http.StatusTooManyRequests
		refuseBudget(cw, api, err.Error())
		if i.notify != nil {
			i.notify(c.name+" budget "+ev.Rule, strings.TrimPrefix(err.Error(), "cordon: "))
		}
		return
	}
	if ex.spend = spend; spend != nil && api == budget.OpenAI {
		if err := askForUsage(r); err != nil {
			deny(http.StatusBadRequest, gatewayRule, err.Error(), "")
			return
		}
	}
	if i.redactions != nil {
		ex.redactions = i.redactions
		ex.red = redact.New(i.redactions(c.name))
	}
	ex.refuseFrame = func(reason string) {
		i.rec.Record(audit.Event{
			Time: time.Now(), Kind: audit.KindHTTP, Name: c.name, Port: c.port,
			Decision: audit.Deny, Rule: gatewayRule, Reason: reason,
			Detail: map[string]string{"method": r.Method, "path": logged, "proto": r.Proto},
		})
		if i.notify != nil {
			i.notify(c.name+" "+r.Method+" "+gatewayRule, fmt.Sprintf("blocked %s %s://%s%s (%s)", r.Method, c.scheme, c.upstream(), logged, reason))
		}
	}
	if ex.red != nil {
		// The answer is searched for the values sent to this host: ask for it unencoded, and a
		// websocket without compression, so that what is searched is what the sandbox reads.
		r.Header.Set("Accept-Encoding", "identity")
		r.Header.Del("Sec-Websocket-Extensions")
	}
	ev.Decision = audit.Allow
	r.Header.Del("Host")
	if r.Body != nil && r.Body != http.NoBody {
		body = &countingBody{ReadCloser: r.Body}
		r.Body = body
		if r.ProtoMajor == 1 {
			// The request body goes upstream while the answer comes back: without full duplex,
			// net/http's HTTP/1 server discards and closes the body when the answer's header is
			// written, while the transport may still be reading it (for bytes past its
			// Content-Length, once the upstream answered), and the transport then closes the
			// upstream connection and cuts the answer being streamed. (net/http's own HTTP/1
			// ResponseWriter, which w is, always supports it.)
			_ = http.NewResponseController(w).EnableFullDuplex()
		}
	}
	ctx := context.WithValue(r.Context(), exchangeKey{}, ex)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { ex.sent.Store(true) }})
	if up != "" && i.relaysMessages(c.name, ex) {
		i.serveWebsocket(cw, r.WithContext(ctx), ex, &ev)
		return
	}
	i.proxy.ServeHTTP(cw, r.WithContext(ctx))
}

// rewrite points the outgoing request at the connection's upstream, whatever the request (or Modify)
// said, and keeps the Host the client sent (checked to name the same host).
func (i *Interceptor) rewrite(pr *httputil.ProxyRequest) {
	c := exchangeOf(pr.In.Context()).conn
	pr.Out.URL.Scheme = c.scheme
	pr.Out.URL.Host = c.upstream()
	pr.Out.URL.User = nil
	pr.Out.Host = pr.In.Host
}

// errorHandler answers 502 when the upstream could not be reached or answered nonsense; a certificate
// the Roots do not vouch for is the gateway's refusal, and is recorded as one. Either is told to the
// human once per host and port (Config.NotifyUpstream).
func (i *Interceptor) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeOf(r.Context())
	if ex == nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	// The outgoing URL (which, for a presigned AWS URL, carries the signature made with the real
	// keys) is not for the sandbox to read: keep only the cause.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	// The cause may quote the upstream's bytes (a 101's header field the websocket client refused,
	// a malformed header line), which may hold a value sent to it: searched as any answer is.
	msg := ex.red.String(err.Error())
	ex.err = msg
	var (
		unknown   x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
		hostname  x509.HostnameError
		verifyErr *tls.CertificateVerificationError
	)
	reason := "the upstream could not be reached"
	up := ex.conn.upstream()
	var line string
	switch {
	case errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) || errors.As(err, &verifyErr):
		ex.refusal = "upstream certificate not verified"
		reason = "the upstream's certificate is not trusted (add its CA to network.tls.caFile if it is meant to be reached)"
		line = fmt.Sprintf("cannot verify the certificate of %s (%s); its requests get 502 — if it is meant to be reached, add its CA to network.tls.caFile", up, msg)
	case errors.Is(err, errUnredactable):
		ex.refusal = refusalOf(err)
		reason = "cordon refused the upstream's answer"
	case !ex.sent.Load():
		line = fmt.Sprintf("cannot reach %s (%s); its requests get 502", up, msg)
	}
	if errors.Is(err, context.Canceled) {
		ex.status = 499 // the client went away; nobody reads the answer
		return
	}
	if line != "" && i.notifyUp != nil {
		i.notifyUp("upstream "+up, line)
	}
	ex.status = http.StatusBadGateway
	target, _ := originForm(r.RequestURI, ex.conn)
	target, _, _ = strings.Cut(target, "?")
	writeDenial(w, r, ex.conn, target, http.StatusBadGateway, reason+": "+msg, "")
}

// writeDenial answers with a plain-text body that names what was refused, why, and how to allow it.
func writeDenial(w http.ResponseWriter, r *http.Request, c *conn, target string, status int, reason, fix string) {
	var b strings.Builder
	fmt.Fprintf(&b, "cordon: blocked %s %s://%s%s: %s\n", r.Method, c.scheme, c.upstream(), target, reason)
	if fix != "" {
		fmt.Fprintf(&b, "to allow: %s\n", fix)
	}
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	h.Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusMisdirectedRequest && r.ProtoMajor == 1 {
		h.Set("Connection", "close")
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, b.String())
}

// originForm returns a request-target in origin-form ("/path?query"), and whether it could. On plain
// HTTP an absolute-form target ("http://name:port/path", what a client sends to an explicit proxy) is
// taken as its path when its authority names the connection's host; every other form is refused.
func originForm(target string, c *conn) (string, bool) {
	if strings.HasPrefix(target, "/") {
		return target, true
	}
	if c.scheme != "http" || len(target) < len("http://") || !strings.EqualFold(target[:len("http://")], "http://") {
		return target, false
	}
	rest := target[len("http://"):]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	if !authorityMatches(rest[:end], c) {
		return target, false
	}
	rest = rest[end:]
	if !strings.HasPrefix(rest, "/") {
		rest = "/" + rest
	}
	return rest, true
}

// authorityMatches reports whether a request's Host (HTTP/1.1) or :authority (HTTP/2) names the
// connection's host; a port, if given, must be the connection's. Anything else is domain fronting.
func authorityMatches(host string, c *conn) bool {
	h, p := host, ""
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		h, p = host[:i], host[i+1:]
		if p == "" {
			return false
		}
	}
	if h == "" || normalName(h) != c.name {
		return false
	}
	return p == "" || p == strconv.Itoa(int(c.port))
}

// upgradeOf is the protocol a request asks to switch to, or "" if it asks for none (the header only
// counts when Connection lists it, as for the proxy that would relay it).
func upgradeOf(h http.Header) string {
	for _, v := range h.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				if up := h.Get("Upgrade"); up != "" {
					return up
				}
				return "(none named)"
			}
		}
	}
	return ""
}

// hostHeadersMatch checks Host header fields that arrived beside :authority in HTTP/2.
func hostHeadersMatch(hs []string, c *conn) bool {
	for _, h := range hs {
		if !authorityMatches(h, c) {
			return false
		}
	}
	return true
}

// countingBody counts the request body bytes read for the upstream.
type countingBody struct {
	io.ReadCloser
	n atomic.Int64 // the transport may still be reading when the handler records
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
