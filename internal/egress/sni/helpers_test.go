package sni

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// Names the test certificate covers.
const (
	secretName = "api.example.test"
	publicName = "public.example.test"
)

// testPKI is a CA and a leaf for secretName, publicName and 127.0.0.1, made fresh for each test.
type testPKI struct {
	pool   *x509.CertPool
	caFile string // PEM, for curl --cacert and openssl -CAfile
	leaf   tls.Certificate
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	ca := testpki.NewCA(t, "cordon sni test CA")
	return &testPKI{pool: ca.Pool, caFile: ca.WriteFile(t, ""), leaf: ca.Leaf(t, secretName, publicName, "127.0.0.1")}
}

// echKeys returns an ECHConfigList for clients and the matching server keys, with publicName as the
// public name (the only name an on-path observer sees).
func echKeys(t testing.TB) (configList []byte, keys []tls.EncryptedClientHelloKey) {
	t.Helper()
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.PublicKey().Bytes()
	var body []byte
	body = append(body, 7)                             // config_id
	body = binary.BigEndian.AppendUint16(body, 0x0020) // DHKEM(X25519, HKDF-SHA256)
	body = binary.BigEndian.AppendUint16(body, uint16(len(pub)))
	body = append(body, pub...)
	body = binary.BigEndian.AppendUint16(body, 4)
	body = binary.BigEndian.AppendUint16(body, 0x0001) // HKDF-SHA256
	body = binary.BigEndian.AppendUint16(body, 0x0001) // AES-128-GCM
	body = append(body, 32)                            // maximum_name_length
	body = append(body, byte(len(publicName)))
	body = append(body, publicName...)
	body = binary.BigEndian.AppendUint16(body, 0) // extensions
	var config []byte
	config = binary.BigEndian.AppendUint16(config, extECH)
	config = binary.BigEndian.AppendUint16(config, uint16(len(body)))
	config = append(config, body...)
	configList = binary.BigEndian.AppendUint16(nil, uint16(len(config)))
	configList = append(configList, config...)
	return configList, []tls.EncryptedClientHelloKey{{Config: config, PrivateKey: priv.Bytes(), SendAsRetry: true}}
}

// ext is one raw extension for the synthetic ClientHellos of the table tests.
type ext struct {
	typ  uint16
	data []byte
}

func sniExt(names ...string) ext {
	var list []byte
	for _, n := range names {
		list = append(list, nameTypeHostName)
		list = binary.BigEndian.AppendUint16(list, uint16(len(n)))
		list = append(list, n...)
	}
	return ext{extServerName, append(binary.BigEndian.AppendUint16(nil, uint16(len(list))), list...)}
}

func alpnExt(protos ...string) ext {
	var list []byte
	for _, p := range protos {
		list = append(list, byte(len(p)))
		list = append(list, p...)
	}
	return ext{extALPN, append(binary.BigEndian.AppendUint16(nil, uint16(len(list))), list...)}
}

// helloBody builds a ClientHello body (without the handshake header) with the given extensions.
func helloBody(exts ...ext) []byte {
	b := []byte{3, 3}
	b = append(b, make([]byte, 32)...) // random
	b = append(b, 32)
	b = append(b, make([]byte, 32)...)          // session id
	b = append(b, 0, 4, 0x13, 0x01, 0x13, 0x02) // cipher suites
	b = append(b, 1, 0)                         // compression: null
	var e []byte
	for _, x := range exts {
		e = binary.BigEndian.AppendUint16(e, x.typ)
		e = binary.BigEndian.AppendUint16(e, uint16(len(x.data)))
		e = append(e, x.data...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(e)))
	return append(b, e...)
}

// handshake wraps a ClientHello body in its handshake header.
func handshake(body []byte) []byte {
	n := len(body)
	return append([]byte{handshakeTypeClientHelo, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

// records splits a handshake message into TLS records of at most frag bytes each.
func records(msg []byte, frag int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(frag, len(msg))
		out = append(out, recordTypeHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// handshakeOf reassembles the handshake message carried by well-formed records.
func handshakeOf(t testing.TB, recs []byte) []byte {
	t.Helper()
	var msg []byte
	for len(recs) > 0 {
		if len(recs) < recordHeaderLen {
			t.Fatalf("truncated record header")
		}
		n := int(binary.BigEndian.Uint16(recs[3:5]))
		msg = append(msg, recs[recordHeaderLen:recordHeaderLen+n]...)
		recs = recs[recordHeaderLen+n:]
	}
	return msg
}

// countRecords counts the TLS records in a prefix Peek returned.
func countRecords(recs []byte) int {
	n := 0
	for len(recs) >= recordHeaderLen {
		recs = recs[recordHeaderLen+int(binary.BigEndian.Uint16(recs[3:5])):]
		n++
	}
	return n
}

// replayConn is a connection whose first bytes are the ones Peek already read: what the gateway hands
// to its upstream.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func replay(c net.Conn, prefix []byte) net.Conn {
	return &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(prefix), c)}
}
