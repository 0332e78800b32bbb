package intercept

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/redact"
)

// errSplitHeader is why a header is refused: a credential value is cut into parts that fields of it
// hold (the end of one, the start of another), which the sandbox can put together and no
// replacement in place can take out. The message never says which fields: their text is the value.
var errSplitHeader = errors.New("a credential value is split across its header fields")

// redactHeader replaces credential values in h's names and values, in place. Names are compared
// without regard to case (redact.Replacer.Name): the transports change a name's case. It fails,
// wrapping errUnredactable, when a value is split across the fields (h's, and the names of also,
// which the sandbox reads beside them), or when a name with its value replaced is no longer a name;
// the answer is then refused. also's names are replaced too.
func redactHeader(red *redact.Replacer, h, also http.Header) error {
	for _, hh := range []http.Header{h, also} {
		renamed := map[string]string{}
		for k, vs := range hh {
			red.Strings(vs)
			if nk := red.Name(k); nk != k {
				renamed[k] = nk
			}
		}
		for k, nk := range renamed {
			if !validName(nk) {
				return fmt.Errorf("%w: a header name holds a credential value whose placeholder cannot stand in a name", errUnredactable)
			}
			nk = textproto.CanonicalMIMEHeaderKey(nk)
			vs := hh[k]
			delete(hh, k)
			hh[nk] = append(hh[nk], vs...)
		}
	}
	if red.Assembled(headerFields(h, headerFields(also, nil))) {
		return fmt.Errorf("%w: %w", errUnredactable, errSplitHeader)
	}
	return nil
}

// headerFields appends h's names and values to fields, each a field of its own.
func headerFields(h http.Header, fields []string) []string {
	for k, vs := range h {
		fields = append(fields, k)
		fields = append(fields, vs...)
	}
	return fields
}

// validName reports whether s is a header field name: a token (RFC 9110, section 5.1).
func validName(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool {
		return r > '~' || r <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r)
	}) < 0
}
