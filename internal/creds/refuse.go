package creds

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// refusal is why a request to host must not get the values it asks for, or nil: a value would go
// out in cleartext (the request's scheme is not https), or the request asks for part of an answer and
// a credential whose value it would carry does not allow ranges. details gets which credentials.
func (s *Set) refusal(r *http.Request, host string, body []byte, details map[string]string) error {
	var wanted []*entry
	for _, e := range s.entries {
		if e.boundTo(host) && e.wants(r, body) {
			wanted = append(wanted, e)
		}
	}
	if len(wanted) == 0 {
		return nil
	}
	if r.URL.Scheme != "https" {
		names := namesOf(wanted)
		details[DetailCleartext] = names
		return fmt.Errorf("credential %s is sent only over TLS (use https://): the request went to %s in cleartext and was refused", names, host)
	}
	asked := ""
	// The headers that ask for part of an answer. Request-Range is the form older servers (and
	// Netscape's clients) used; some servers still honour it.
	for _, h := range [...]string{"Range", "If-Range", "Request-Range"} {
		if _, ok := r.Header[h]; ok {
			asked = h
			break
		}
	}
	if asked == "" {
		return nil
	}
	var refused []*entry
	for _, e := range wanted {
		if !e.inject.Ranges {
			refused = append(refused, e)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	names := namesOf(refused)
	details[DetailRange] = names
	return fmt.Errorf("credential %s is not sent with %s (an answer in pieces escapes redaction); to allow: ranges: true in the credential's inject", names, asked)
}

// wants reports whether r (with body, when read) carries e's placeholder where e's value would be
// put: the places inject1 replaces, or for AWS keys a signature made with the placeholder key id.
func (e *entry) wants(r *http.Request, body []byte) bool {
	if e.aws != nil {
		id := e.awsPH.AccessKeyID
		for _, v := range r.Header["Authorization"] {
			if strings.Contains(v, id) {
				return true
			}
		}
		return strings.Contains(r.URL.RawQuery, id) // a presigned URL's X-Amz-Credential
	}
	if e.header != "" {
		for _, v := range r.Header[e.header] {
			if strings.Contains(v, e.placeholder) {
				return true
			}
		}
	}
	if e.inject.Scheme != "" {
		// The value itself is not needed to tell: a stand-in without ':' shows where it would go.
		standIn := func() (string, error) { return "x", nil }
		for _, v := range r.Header["Authorization"] {
			if _, ok, _ := replaceAuthorization(v, e.inject.Scheme, e.placeholder, standIn); ok {
				return true
			}
		}
	}
	return e.inject.Body && body != nil && bytes.Contains(body, []byte(e.placeholder))
}

// namesOf joins the credentials' names for a message or an audit detail.
func namesOf(es []*entry) string {
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.name
	}
	return strings.Join(names, ",")
}
