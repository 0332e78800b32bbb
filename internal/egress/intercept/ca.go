package intercept

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

// Validity of the run's certificates. The CA outlives any sensible run; leaves are short so that a
// leaf copied out of the sandbox's memory is soon worthless, and are minted again before they expire.
const (
	caValidity    = 30 * 24 * time.Hour
	leafValidity  = 24 * time.Hour
	leafRenewal   = time.Hour // mint again when a cached leaf has less than this left
	clockSkew     = time.Hour // NotBefore in the past, for clients whose clock is a little behind
	leafCacheSize = 1024
)

// CA is one run's certificate authority. Its ECDSA P-256 key is generated in memory and never
// written anywhere, so only the sandbox that was handed CertPEM trusts it, and only for this run.
// It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewCA generates a fresh authority.
func NewCA() (*CA, error) {
	return newCA(time.Now)
}

func newCA(now func() time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("intercept: generating the CA key: %w", err)
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	id := serial.Text(16)
	id = id[:min(8, len(id))]
	t := now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"cordon"}, CommonName: "cordon run CA " + id},
		NotBefore:             t.Add(-clockSkew),
		NotAfter:              t.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves only, never another CA
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("intercept: signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("intercept: parsing the CA certificate: %w", err)
	}
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		now:     now,
		leaves:  make(map[string]*tls.Certificate),
	}, nil
}

// CertPEM is the CA certificate (never its key) in PEM form: what the sandbox is told to trust.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Certificate is the parsed CA certificate, for callers that build a pool from it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns a certificate for host signed by the CA, minting it on first use and again when the
// cached one is near its end. host is a DNS name; IP addresses and wildcards are refused, because
// the gateway intercepts connections by name only.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if err := checkLeafName(host); err != nil {
		return nil, err
	}
	now := ca.now()
	ca.mu.Lock()
	c := ca.leaves[host]
	ca.mu.Unlock()
	if c != nil && now.Before(c.Leaf.NotAfter.Add(-leafRenewal)) {
		return c, nil
	}
	c, err := ca.mint(host, now)
	if err != nil {
		return nil, err
	}
	ca.mu.Lock()
	if len(ca.leaves) >= leafCacheSize {
		clear(ca.leaves) // crude, but bounded: only names the caller chose to intercept get here
	}
	ca.leaves[host] = c
	ca.mu.Unlock()
	return c, nil
}

func checkLeafName(host string) error {
	switch {
	case host == "":
		return errors.New("intercept: a certificate needs a host name")
	case strings.ContainsAny(host, "*:/ \\") || strings.Trim(host, "0123456789.") == "":
		return fmt.Errorf("intercept: %q is not a host name a certificate can be minted for", host)
	}
	return nil
}

func (ca *CA) mint(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("intercept: generating a key for %s: %w", host, err)
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("intercept: signing a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("intercept: parsing the certificate for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

func randSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("intercept: drawing a serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
