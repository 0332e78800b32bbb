package githubapp

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

// TestSignAppJWT checks the signer against the JWT rules by hand, with the standard library's RSA
// verification: the fake GitHub's golang-jwt verifier is the second, independent check.
func TestSignAppJWT(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tok, err := signAppJWT(key, 4242, now)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("JWT has %d parts", len(parts))
	}
	var header map[string]any
	decode(t, parts[0], &header)
	if len(header) != 2 || header["alg"] != "RS256" || header["typ"] != "JWT" {
		t.Errorf("header %v", header)
	}
	var claims map[string]any
	decode(t, parts[1], &claims)
	want := map[string]any{"iat": float64(now.Unix() - 60), "exp": float64(now.Unix() + 540), "iss": "4242"}
	if len(claims) != len(want) {
		t.Errorf("claims %v, want %v", claims, want)
	}
	for k, v := range want {
		if claims[k] != v {
			t.Errorf("claim %s = %v, want %v", k, claims[k], v)
		}
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(&key.PublicKey, crypto.SHA256, digest[:], sig); err != nil {
		t.Errorf("signature does not verify: %v", err)
	}
	tampered := sha256.Sum256([]byte(parts[0] + "." + parts[1] + "x"))
	if rsa.VerifyPKCS1v15(&key.PublicKey, crypto.SHA256, tampered[:], sig) == nil {
		t.Error("signature verifies over other content: the check above cannot fail")
	}
}

func decode(t *testing.T, seg string, v any) {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatalf("segment %q: %v", seg, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("segment %s: %v", b, err)
	}
}

func TestParsePrivateKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := func(k any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not parsed")})

	tests := []struct {
		name    string
		pem     []byte
		wantErr string
	}{
		{"PKCS#1", pkcs1, ""},
		{"PKCS#8", pkcs8(key), ""},
		{"after another block", append(cert, pkcs1...), ""},
		{"empty", nil, "no PEM"},
		{"not PEM", []byte("ghp_notakey"), "no PEM"},
		{"corrupt PKCS#1", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte("garbage")}), "does not parse"},
		{"corrupt PKCS#8", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("garbage")}), "does not parse"},
		{"EC key", pkcs8(ec), "GitHub Apps use RSA"},
		{"1024-bit", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(small)}), "1024 bits"},
		{"public key only", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("x")}), "no PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePrivateKey(tt.pem)
			if tt.wantErr == "" {
				if err != nil || !got.Equal(key) {
					t.Fatalf("got %v, want the key", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
