package javatrust

import (
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// jks writes a JKS store (version 2) of trusted certificates, as keytool does, with a zero digest.
func jks(certs ...*x509.Certificate) []byte {
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.BigEndian, v) }
	utf := func(s string) { w(uint16(len(s))); b.WriteString(s) }
	w(uint32(jksMagic))
	w(uint32(2))
	w(uint32(len(certs)))
	for i, c := range certs {
		w(uint32(tagTrusted))
		utf("alias" + string(rune('a'+i)))
		w(uint64(0))
		utf("X.509")
		w(uint32(len(c.Raw)))
		b.Write(c.Raw)
	}
	b.Write(make([]byte, 20))
	return b.Bytes()
}

func keytool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("keytool")
	if err != nil {
		t.Skip("keytool (a JDK) not installed (.ci/run installs default-jdk-headless)")
	}
	return p
}

// TestDecodeKeytoolStores: the stores keytool writes, JKS (Debian's cacerts) and PKCS#12, are read
// with the certificate keytool was given.
func TestDecodeKeytoolStores(t *testing.T) {
	kt := keytool(t)
	ca := testpki.NewCA(t, "javatrust test CA")
	dir := t.TempDir()
	pemFile := ca.WriteFile(t, dir)
	for _, typ := range []string{"JKS", "PKCS12"} {
		t.Run(typ, func(t *testing.T) {
			store := filepath.Join(dir, "store."+typ)
			out, err := exec.Command(kt, "-importcert", "-noprompt", "-alias", "test", "-file", pemFile,
				"-keystore", store, "-storetype", typ, "-storepass", Password).CombinedOutput()
			if err != nil {
				t.Fatalf("keytool: %v\n%s", err, out)
			}
			b, err := os.ReadFile(store)
			if err != nil {
				t.Fatal(err)
			}
			certs, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(certs) != 1 || !bytes.Equal(certs[0], ca.Cert.Raw) {
				t.Fatalf("decoded %d certificates, want the CA", len(certs))
			}
		})
	}
}

// TestBuildIsReadByKeytool: the store built from a host store plus extra certificates lists both to
// Java's own tool, as the type the sandbox's JAVA_TOOL_OPTIONS names, and its integrity digest is
// made with Password (keytool refuses the store under another); with no host store the PEM
// bundle's roots are taken, and a certificate given twice is one entry.
func TestBuildIsReadByKeytool(t *testing.T) {
	kt := keytool(t)
	host := testpki.NewCA(t, "host root")
	extra := testpki.NewCA(t, "run CA")
	dir := t.TempDir()
	hostStore := filepath.Join(dir, "cacerts")
	if err := os.WriteFile(hostStore, jks(host.Cert), 0o644); err != nil {
		t.Fatal(err)
	}
	extraPEM, err := os.ReadFile(extra.WriteFile(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	hostPEMFile := host.WriteFile(t, t.TempDir())
	hostPEM, err := os.ReadFile(hostPEMFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		stores   []string
		fallback string
		extra    []byte
	}{
		{"host store", []string{filepath.Join(dir, "missing"), hostStore}, "", extraPEM},
		{"PEM fallback", []string{filepath.Join(dir, "missing")}, hostPEMFile, extraPEM},
		{"a host root added again", []string{hostStore}, hostPEMFile, append(append([]byte{}, hostPEM...), extraPEM...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Build(tc.stores, tc.fallback, tc.extra)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "store")
			if err := os.WriteFile(out, b, 0o644); err != nil {
				t.Fatal(err)
			}
			list, err := exec.Command(kt, "-list", "-v", "-keystore", out, "-storetype", StoreType, "-storepass", Password).CombinedOutput()
			if err != nil {
				t.Fatalf("keytool: %v\n%s", err, list)
			}
			for _, want := range []string{"Your keystore contains 2 entries", "CN=host root", "CN=run CA", "trustedCertEntry"} {
				if !strings.Contains(string(list), want) {
					t.Fatalf("keytool does not list %q:\n%s", want, list)
				}
			}
			if list, err := exec.Command(kt, "-list", "-keystore", out, "-storetype", StoreType, "-storepass", "not"+Password).CombinedOutput(); err == nil {
				t.Fatalf("keytool read the store with another password:\n%s", list)
			}
		})
	}
}

// TestBuildRefuses: an unreadable host store and extra bytes that hold no certificate are errors,
// not a store that trusts less than asked.
func TestBuildRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "cacerts")
	if err := os.WriteFile(bad, []byte("not a key store"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build([]string{bad}, "", nil); err == nil {
		t.Fatal("a store that is neither JKS nor PKCS#12 was accepted")
	}
	if _, err := Build(nil, filepath.Join(dir, "missing.pem"), nil); err == nil {
		t.Fatal("a fallback bundle that cannot be read was taken for an empty one")
	}
	if _, err := Build(nil, "", []byte("garbage")); err == nil {
		t.Fatal("extra bytes without a certificate were accepted")
	}
}

// FuzzDecode: no input makes the reader panic or loop past its input.
func FuzzDecode(f *testing.F) {
	ca := testpki.NewCA(f, "fuzz CA")
	f.Add(jks(ca.Cert))
	f.Add(jks())
	f.Add([]byte{0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		certs, err := Decode(b)
		if err == nil && isJKS(b) && len(certs) > maxEntries {
			t.Fatalf("%d certificates", len(certs))
		}
	})
}
