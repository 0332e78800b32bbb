package awssig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
)

// verifySigV4 checks r's SigV4 signature the way an AWS service does, written
// from the specification and independent of the signer under test: it
// rebuilds the canonical request from what arrived, derives the signing key
// from secret and compares signatures. It also demands keyID and, when token
// is not empty, that X-Amz-Security-Token is token and signed.
func verifySigV4(r *http.Request, body []byte, keyID, secret, token string) error {
	q := r.URL.Query()
	authz := r.Header.Get("Authorization")
	date := r.Header.Get("X-Amz-Date")
	tok := r.Header.Get("X-Amz-Security-Token")
	payload := r.Header.Get("X-Amz-Content-Sha256")
	presigned := authz == "" && q.Get("X-Amz-Credential") != ""
	if presigned {
		if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
			return errors.New("AuthorizationQueryParametersError")
		}
		authz = "AWS4-HMAC-SHA256 Credential=" + q.Get("X-Amz-Credential") + ", SignedHeaders=" + q.Get("X-Amz-SignedHeaders") + ", Signature=" + q.Get("X-Amz-Signature")
		date, tok = q.Get("X-Amz-Date"), q.Get("X-Amz-Security-Token")
		q.Del("X-Amz-Signature")
	}
	a, ok, err := ParseAuthorization(authz)
	if !ok || err != nil {
		return fmt.Errorf("no SigV4 authorization: %v", err)
	}
	if presigned && payload == "" && a.Service == "s3" {
		payload = "UNSIGNED-PAYLOAD"
	}
	if a.AccessKeyID != keyID {
		return errors.New("InvalidAccessKeyId")
	}
	signed := map[string]bool{}
	for _, h := range a.SignedHeaders {
		signed[h] = true
	}
	if !signed["host"] {
		return errors.New("host not signed")
	}
	if token != "" && (tok != token || !presigned && !signed["x-amz-security-token"]) {
		return errors.New("InvalidToken")
	}
	var canon strings.Builder
	for _, h := range a.SignedHeaders {
		var vals []string
		switch h {
		case "host":
			vals = []string{r.Host}
		case "content-length":
			vals = []string{fmt.Sprint(r.ContentLength)}
		default:
			vals = r.Header.Values(h)
		}
		for i, v := range vals {
			vals[i] = strings.Join(strings.Fields(v), " ")
		}
		canon.WriteString(h + ":" + strings.Join(vals, ",") + "\n")
	}
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(a.Service, "s3") {
		path = uriEncode(path, false)
	}
	var pairs [][2]string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, [2]string{uriEncode(k, true), uriEncode(v, true)})
		}
	}
	// Sorted by encoded name, then value.
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	var query []string
	for _, p := range pairs {
		query = append(query, p[0]+"="+p[1])
	}
	if sum := sha256.Sum256(body); payload == "" {
		payload = hex.EncodeToString(sum[:])
	} else if !strings.HasPrefix(payload, "STREAMING-") && payload != "UNSIGNED-PAYLOAD" && payload != hex.EncodeToString(sum[:]) {
		return errors.New("XAmzContentSHA256Mismatch")
	}
	creq := strings.Join([]string{r.Method, path, strings.Join(query, "&"), canon.String(), strings.Join(a.SignedHeaders, ";"), payload}, "\n")
	h := sha256.Sum256([]byte(creq))
	scope := a.Date + "/" + a.Region + "/" + a.Service + "/aws4_request"
	sts := "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + hex.EncodeToString(h[:])
	key := mac([]byte("AWS4"+secret), a.Date)
	key = mac(key, a.Region)
	key = mac(key, a.Service)
	key = mac(key, "aws4_request")
	if want := hex.EncodeToString(mac(key, sts)); !hmac.Equal([]byte(want), []byte(a.Signature)) {
		return errors.New("SignatureDoesNotMatch")
	}
	return nil
}

func mac(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, s)
	return m.Sum(nil)
}

// uriEncode percent-encodes every byte but the unreserved ones (and '/',
// unless slash is true), as the SigV4 specification says.
func uriEncode(s string, slash bool) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-_.~", c) >= 0 || c == '/' && !slash {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
