// Package javatrust builds the truststore Java reads inside the sandbox. Java ignores the system's
// PEM bundle and the variables other runtimes read (SSL_CERT_FILE and the like): it trusts only its
// own keystore, so a run whose gateway intercepts TLS, or whose upstreams use a private CA, needs a
// keystore holding the host's Java roots plus those certificates, or every Java tool (gradle, maven)
// fails with "PKIX path building failed". The host's store is read as it is (JKS, which Debian's
// ca-certificates-java writes, or PKCS#12). The result is JKS: every Java reads it (Java 9 and later
// under the PKCS12 type too), and it is made on the start's path of every run that intercepts, where
// JKS is a digest over the certificates as they are and PKCS#12 a DER encoding, an encryption and a
// MAC, each with its key derivation (0.3 against 3 ms).
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
	"time"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"
)

// Password is the store's password, Java's customary one for trust stores: a trust store holds
// public certificates only, and its password guards nothing but the file's integrity.
const Password = "changeit"

// StoreType is the store's type, as javax.net.ssl.trustStoreType names it.
const StoreType = "JKS"

// HostStores are where distributions keep the JDK-independent Java trust store, Debian's first.
var HostStores = []string{
	"/etc/ssl/certs/java/cacerts",
	"/etc/pki/ca-trust/extracted/java/cacerts",
	"/etc/pki/java/cacerts",
}

// Build returns a JKS trust store (Password, StoreType) holding the certificates of the first
// readable store among stores (JKS or PKCS#12 with Password or none) or, when there is none, those
// of the PEM bundle at the path fallback (none when it is ""), plus the PEM certificates of extra.
// A store that exists but cannot be read is an error: the sandbox would trust less than the host
// does without saying so. The host store's certificates are carried as they are, not parsed: they
// are what the host's Java trusts.
func Build(stores []string, fallback string, extra []byte) ([]byte, error) {
	var roots [][]byte
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
	if !found && fallback != "" {
		b, err := os.ReadFile(fallback)
		if err != nil {
			return nil, fmt.Errorf("javatrust: %w", err)
		}
		roots = rawCertificates(b)
	}
	added := rawCertificates(extra)
	if len(added) == 0 && len(bytes.TrimSpace(extra)) > 0 {
		return nil, errors.New("javatrust: the certificates to add hold no PEM certificate")
	}
	ks := keystore.New(keystore.WithOrderedAliases())
	created := time.Now()
	for _, der := range append(roots, added...) {
		sum := sha256.Sum256(der)
		// Aliases must differ (Java folds entries of one alias); a fingerprint prefix is stable,
		// and a certificate given twice is one entry.
		entry := keystore.TrustedCertificateEntry{CreationTime: created, Certificate: keystore.Certificate{Type: "X.509", Content: der}}
		if err := ks.SetTrustedCertificateEntry("cordon-"+hex.EncodeToString(sum[:8]), entry); err != nil {
			return nil, fmt.Errorf("javatrust: %w", err)
		}
	}
	var out bytes.Buffer
	if err := ks.Store(&out, []byte(Password)); err != nil {
		return nil, fmt.Errorf("javatrust: encoding the store: %w", err)
	}
	return out.Bytes(), nil
}

// Decode returns the DER of the trusted certificates of a JKS or PKCS#12 key store.
func Decode(b []byte) ([][]byte, error) {
	if isJKS(b) {
		return decodeJKS(b)
	}
	var errs []error
	for _, pw := range []string{Password, ""} {
		certs, err := pkcs12.DecodeTrustStore(b, pw)
		if err == nil {
			out := make([][]byte, len(certs))
			for i, c := range certs {
				out[i] = c.Raw
			}
			return out, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("neither JKS nor a PKCS#12 trust store: %w", errors.Join(errs...))
}

// rawCertificates is the DER of PEMCertificates(b).
func rawCertificates(b []byte) [][]byte {
	var out [][]byte
	for _, c := range PEMCertificates(b) {
		out = append(out, c.Raw)
	}
	return out
}

// PEMCertificates parses every CERTIFICATE block of b, skipping what does not parse (a bundle may hold
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
