package githubapp

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The JWT an app signs to authenticate as itself may live at most 10 minutes; GitHub also rejects an iat
// ahead of its own clock. Backdating iat by a minute absorbs clock skew between this host and GitHub, and
// exp at 9 minutes stays inside the limit on the same skew.
const (
	jwtBackdate = 60 * time.Second
	jwtLifetime = 9 * time.Minute
)

// minKeyBits refuses keys weaker than what GitHub generates (2048-bit RSA), so a truncated or toy key
// in the operator's configuration is caught here rather than trusted.
const minKeyBits = 2048

// parsePrivateKey reads the app's RSA private key from PEM, in either encoding GitHub users meet:
// PKCS#1 ("RSA PRIVATE KEY", what GitHub downloads) or PKCS#8 ("PRIVATE KEY", what openssl and many
// secret stores convert it to). Errors never quote the input: it is a secret.
func parsePrivateKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	rest := pemBytes
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM-encoded RSA private key found")
		}
		var key *rsa.PrivateKey
		switch block.Type {
		case "RSA PRIVATE KEY":
			k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
			if err != nil {
				return nil, errors.New("PKCS#1 private key does not parse")
			}
			key = k
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, errors.New("PKCS#8 private key does not parse")
			}
			rk, ok := k.(*rsa.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("PKCS#8 private key is %T, GitHub Apps use RSA", k)
			}
			key = rk
		default:
			// Skip other blocks (a certificate bundled in the same file, say).
			continue
		}
		if bits := key.N.BitLen(); bits < minKeyBits {
			return nil, fmt.Errorf("RSA key has %d bits, want at least %d", bits, minKeyBits)
		}
		return key, nil
	}
}

// jwtHeader is constant: cordon only ever signs RS256, the one algorithm GitHub accepts for apps.
var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))

// jwtClaims are the three claims GitHub reads. iss is the app id as a string (RFC 7519 StringOrURI;
// GitHub accepts the numeric form too).
type jwtClaims struct {
	IssuedAt  int64  `json:"iat"`
	ExpiresAt int64  `json:"exp"`
	Issuer    string `json:"iss"`
}

// signAppJWT makes the app's bearer token for the app-level API (minting installation tokens).
//
// Signing is the easy direction of JWT: a fixed header, three claims, one PKCS#1 v1.5 signature over
// SHA-256. Doing it with the standard library keeps a JWT library out of cordon's binary; the parsing
// direction, where JWT libraries earn their keep, happens only in the fake GitHub, which verifies these
// tokens with github.com/golang-jwt/jwt/v5, so tests check this signer against an independent verifier.
func signAppJWT(key *rsa.PrivateKey, appID int64, now time.Time) (string, error) {
	claims, err := json.Marshal(jwtClaims{
		IssuedAt:  now.Add(-jwtBackdate).Unix(),
		ExpiresAt: now.Add(jwtLifetime).Unix(),
		Issuer:    strconv.FormatInt(appID, 10),
	})
	if err != nil {
		return "", fmt.Errorf("encode JWT claims: %w", err)
	}
	signingInput := jwtHeader + "." + base64.RawURLEncoding.EncodeToString(claims)
	digest := sha256.Sum256([]byte(signingInput))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		return "", fmt.Errorf("sign JWT: %w", err)
	}
	return signingInput + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}
