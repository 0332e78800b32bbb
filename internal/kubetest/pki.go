package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's certificate authority: it signs the API server's serving certificate (which
// the admin kubeconfig and the pods' kube-root-ca.crt trust) and the client certificate the API
// server shows kubelet (which kubelet's x509 authentication trusts). Everything is made afresh at
// each Start and lives a day.
type pki struct {
	dir    string
	key    *ecdsa.PrivateKey
	cert   *x509.Certificate
	CAFile string
	CAPEM  []byte
	serial int64
}

func newPKI(dir string) (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("kubetest: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cordon-kubetest-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("kubetest: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("kubetest: CA certificate: %w", err)
	}
	p := &pki{dir: dir, key: key, cert: cert, serial: 1,
		CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	p.CAFile = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(p.CAFile, p.CAPEM, 0o644); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	return p, nil
}

// issue writes name.crt and name.key: a serving certificate for hosts (names or IP literals) when
// server, else a client certificate for the user cn in the groups orgs. It returns the two paths.
func (p *pki) issue(name, cn string, orgs []string, server bool, hosts ...string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("kubetest: key for %s: %w", name, err)
	}
	p.serial++
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		return "", "", fmt.Errorf("kubetest: certificate for %s: %w", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("kubetest: key for %s: %w", name, err)
	}
	certFile, keyFile = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", fmt.Errorf("kubetest: %w", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", fmt.Errorf("kubetest: %w", err)
	}
	return certFile, keyFile, nil
}

// writeKey writes a fresh ECDSA key as name.key and its public half as name.pub (the service
// accounts' token signing key).
func (p *pki) writeKey(name string) (keyFile, pubFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("kubetest: %s key: %w", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("kubetest: %s key: %w", name, err)
	}
	pder, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", fmt.Errorf("kubetest: %s key: %w", name, err)
	}
	keyFile, pubFile = filepath.Join(p.dir, name+".key"), filepath.Join(p.dir, name+".pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", fmt.Errorf("kubetest: %w", err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), 0o644); err != nil {
		return "", "", fmt.Errorf("kubetest: %w", err)
	}
	return keyFile, pubFile, nil
}

// token is a fresh bearer token for the token auth file.
func token() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("kubetest: token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
