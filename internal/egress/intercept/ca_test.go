package intercept

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

// TestLeaf: a leaf verifies for its name under the run CA, and for nothing else; another run's CA does
// not vouch for it.
func TestLeaf(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("GitHub.com.")
	if err != nil {
		t.Fatal(err)
	}
	verify := func(c *CA, name string) error {
		roots := x509.NewCertPool()
		roots.AddCert(c.Certificate())
		_, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	if err := verify(ca, "github.com"); err != nil {
		t.Fatalf("the leaf does not verify for its name: %v", err)
	}
	if err := verify(ca, "gitlab.com"); err == nil {
		t.Fatal("the leaf verifies for another name")
	}
	if err := verify(other, "github.com"); err == nil {
		t.Fatal("another run's CA vouches for this run's leaf")
	}
	if life := time.Until(leaf.Leaf.NotAfter); life > leafValidity || life < leafValidity-time.Minute {
		t.Fatalf("leaf valid for %v", life)
	}
	if leaf.Leaf.IsCA {
		t.Fatal("a leaf is a CA")
	}
	again, err := ca.Leaf("github.com")
	if err != nil || again != leaf {
		t.Fatalf("the leaf was not cached: %v", err)
	}
	if c := ca.Certificate(); !c.IsCA || !c.MaxPathLenZero || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("CA certificate %+v", c)
	}
}

// TestLeafRenewal: a cached leaf is minted again before it expires.
func TestLeafRenewal(t *testing.T) {
	now := time.Now()
	ca, err := newCA(func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	first, err := ca.Leaf("github.com")
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(leafValidity - leafRenewal - time.Minute)
	if same, _ := ca.Leaf("github.com"); same != first {
		t.Fatal("renewed too early")
	}
	now = now.Add(2 * time.Minute)
	renewed, err := ca.Leaf("github.com")
	if err != nil || renewed == first || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatalf("not renewed near expiry: %v", err)
	}
}

func TestLeafRefusesNonNames(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"", "*.github.com", "10.0.0.1", "::1", "github.com:443", "git hub.com", "a/b"} {
		if _, err := ca.Leaf(h); err == nil {
			t.Errorf("Leaf(%q) minted a certificate", h)
		}
	}
}

// TestCertPEM: what the sandbox gets is one certificate and no key.
func TestCertPEM(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	p := ca.CertPEM()
	block, rest := pem.Decode(p)
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 || strings.Contains(string(p), "PRIVATE") {
		t.Fatalf("CertPEM is not exactly one certificate:\n%s", p)
	}
	if !bytes.Equal(block.Bytes, ca.Certificate().Raw) {
		t.Fatal("CertPEM is not the CA's certificate")
	}
	p[0] = 'X'
	if ca.CertPEM()[0] == 'X' {
		t.Fatal("CertPEM hands out the CA's own buffer")
	}
}
