// Package javatrust builds the truststore Java reads inside the sandbox. Java ignores the system's
// PEM bundle and the variables other runtimes read (SSL_CERT_FILE and the like): it trusts only its
// own keystore, so a run whose gateway intercepts TLS, or whose upstreams use a private CA, needs a
// keystore holding the host's Java roots plus those certificates, or every Java tool (gradle, maven)
// fails with "PKIX path building failed". The host's store is read as it is (JKS, which Debian's
// ca-certificates-java writes, or PKCS#12); the result is PKCS#12, which every Java since 9 reads.
package javatrust

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"software.sslmate.com/src/go-pkcs12"
)

// Password is the store's password, Java's customary one for trust stores: a trust store holds
// public certificates only, and its password guards nothing but the file's integrity.
const Password = "changeit"

// HostStores are where distributions keep the JDK-independent Java trust store, Debian's first.
var HostStores = []string{
	"/etc/ssl/certs/java/cacerts",
	"/etc/pki/ca-trust/extracted/java/cacerts",
	"/etc/pki/java/cacerts",
}

// Build returns a PKCS#12 trust store holding the certificates of the first readable store among
// stores (JKS or PKCS#12 with Password or none) or, when there is none, those of the PEM bundle
// fallback, plus the PEM certificates of extra. A store that exists but cannot be read is an error:
// the sandbox would trust less than the host does without saying so.
func Build(stores []string, fallback, extra []byte) ([]byte, error) {
	var roots []*x509.Certificate
	found := false
	for _, p := range stores {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("javatrust: %w", err)
		}
		if roots, err = Decode(b); err != nil {
			return nil, fmt.Errorf("javatrust: %s: %w", p, err)
		}
		found = true
		break
	}
	if !found {
		roots = PEMCertificates(fallback)
	}
	added := PEMCertificates(extra)
	if len(added) == 0 && len(bytes.TrimSpace(extra)) > 0 {
		return nil, errors.New("javatrust: the certificates to add hold no PEM certificate")
	}
	entries := make([]pkcs12.TrustStoreEntry, 0, len(roots)+len(added))
	seen := map[[32]byte]bool{}
	for _, c := range append(roots, added...) {
		sum := sha256.Sum256(c.Raw)
		if seen[sum] {
			continue
		}
		seen[sum] = true
		// Aliases must differ (Java folds entries of one alias); a fingerprint prefix is stable.
		entries = append(entries, pkcs12.TrustStoreEntry{Cert: c, FriendlyName: "cordon-" + hex.EncodeToString(sum[:8])})
	}
	out, err := pkcs12.Modern2023.EncodeTrustStoreEntries(entries, Password)
	if err != nil {
		return nil, fmt.Errorf("javatrust: encoding the store: %w", err)
	}
	return out, nil
}

// Decode reads the trusted certificates of a JKS or PKCS#12 key store.
func Decode(b []byte) ([]*x509.Certificate, error) {
	if isJKS(b) {
		return decodeJKS(b)
	}
	var errs []error
	for _, pw := range []string{Password, ""} {
		certs, err := pkcs12.DecodeTrustStore(b, pw)
		if err == nil {
			return certs, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("neither JKS nor a PKCS#12 trust store: %w", errors.Join(errs...))
}

// pemCerts parses every CERTIFICATE block of b, skipping what does not parse (a bundle may hold
// a certificate Go refuses, which the store then lacks, as Go's own pool would).
func PEMCertificates(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			out = append(out, c)
		}
	}
}
