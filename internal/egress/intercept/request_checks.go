package intercept

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/httpoverride"
)

// On a host whose requests rules limit, a request is judged by its method and path; the checks here
// close the ways a request that passes that judgement can still make a lenient upstream do something
// else: a body on a method whose body has no meaning (which a server may read as a second request,
// or as the parameters of another action), a header that names another method or path, and an
// upgrade to a tunnel the rules no longer see.

// overridesOf lists, sorted and in comparison form (httpoverride.Key), the method-override and
// URL-rewrite headers the request carries (see internal/httpoverride: a GET-only rule would otherwise
// pass a DELETE, and a path rule a request for another path).
func overridesOf(h http.Header) []string {
	var out []string
	for k := range h {
		if key := httpoverride.Key(k); httpoverride.IsKey(key) && !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// bodyless reports whether a method's request body has no defined meaning (RFC 9110 9.3): a body on
// one is refused on rule-limited hosts unless the rule allows it.
func bodyless(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodDelete, http.MethodTrace:
		return true
	}
	return false
}

// hasBody reports whether r carries a body of at least one byte. A body of unknown length (chunked,
// or an HTTP/2 stream left open) is read for one byte to tell; when it is empty, r.Body is replaced
// by http.NoBody so that none is sent upstream either.
func hasBody(r *http.Request) bool {
	switch {
	case r.ContentLength > 0:
		return true
	case r.Body == nil || r.Body == http.NoBody:
		return false
	case r.ContentLength == 0 && len(r.TransferEncoding) == 0:
		return false
	}
	var one [1]byte
	n, err := io.ReadFull(r.Body, one[:])
	if n == 0 && errors.Is(err, io.EOF) {
		_ = r.Body.Close()
		r.Body, r.ContentLength = http.NoBody, 0
		return false
	}
	// A byte (or a read error: fail closed) means a body; the request is refused, so the byte read
	// is never missed.
	return true
}

// checkWebsocket checks that an upgrade request is a well-formed websocket opening handshake (RFC 6455
// 4.1): HTTP/1.1 GET, Upgrade naming websocket alone, a Sec-WebSocket-Key of 16 bytes in base64 and
// version 13. Anything else after a 101 would be a tunnel of some other protocol.
func checkWebsocket(r *http.Request) error {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return fmt.Errorf("websocket handshake over %s (want HTTP/1.1)", r.Proto)
	}
	if r.Method != http.MethodGet {
		return fmt.Errorf("websocket handshake with %s (want GET)", r.Method)
	}
	if ups := r.Header.Values("Upgrade"); len(ups) != 1 || !strings.EqualFold(strings.TrimSpace(ups[0]), "websocket") {
		return fmt.Errorf("upgrade to %q (want websocket alone)", strings.Join(ups, ", "))
	}
	keys := r.Header.Values("Sec-Websocket-Key")
	if len(keys) != 1 {
		return errors.New("websocket handshake without one Sec-WebSocket-Key")
	}
	if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(k) != 16 {
		return errors.New("websocket handshake whose Sec-WebSocket-Key is not 16 bytes in base64")
	}
	if vs := r.Header.Values("Sec-Websocket-Version"); len(vs) != 1 || strings.TrimSpace(vs[0]) != "13" {
		return fmt.Errorf("websocket version %q (want 13)", strings.Join(vs, ", "))
	}
	return nil
}

// extras is what a request asks beyond its method and path, each of which a rule must allow
// explicitly.
type extras struct {
	body      bool     // a body on a bodyless method
	websocket bool     // an upgrade (already checked to be a websocket handshake)
	overrides []string // override headers present, in comparison form
}

// missing says what of x the access a does not allow, as a reason and a fix; "" when it allows all.
func (a access) missing(method string, x extras) (reason, fix string) {
	switch {
	case x.body && !a.body:
		return fmt.Sprintf("a request body on %s is not allowed by %s", method, a.source),
			fmt.Sprintf("add body: true to %s", a.source)
	case x.websocket && !a.websocket:
		return fmt.Sprintf("a websocket upgrade is not allowed by %s", a.source),
			fmt.Sprintf("add websocket: true to %s", a.source)
	}
	var denied []string
	for _, h := range x.overrides {
		if !slices.Contains(a.headers, h) {
			denied = append(denied, h)
		}
	}
	if len(denied) > 0 {
		return fmt.Sprintf("method-override or URL-rewrite header %s is not allowed by %s", strings.Join(denied, ", "), a.source),
			fmt.Sprintf("add headers: [%s] to %s", strings.Join(denied, ", "), a.source)
	}
	return "", ""
}

// validHeaderName reports whether s is an HTTP field name (a token, RFC 9110 5.6.2).
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}
