package javatrust

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The JKS format (sun.security.provider.JavaKeyStore): a magic number, a version (1 or 2) and a
// count, then per entry a tag (1: private key, 2: trusted certificate), an alias and a time stamp,
// then the key and its chain or one certificate; a SHA-1 over the password and the content ends it.
// Only trusted certificates are read; the integrity digest is not checked (the password is the
// host's, and the file is the host's own, which cordon reads as it would its PEM bundle).
const (
	jksMagic      = 0xFEEDFEED
	tagPrivateKey = 1
	tagTrusted    = 2
	// maxEntries bounds what a count field can make the reader loop over.
	maxEntries = 1 << 16
)

func isJKS(b []byte) bool { return len(b) >= 4 && binary.BigEndian.Uint32(b) == jksMagic }

type jksReader struct {
	b   []byte
	err error
}

func (r *jksReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = errors.New("truncated JKS store")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *jksReader) u16() int {
	if b := r.take(2); b != nil {
		return int(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *jksReader) u32() int {
	if b := r.take(4); b != nil {
		return int(int32(binary.BigEndian.Uint32(b)))
	}
	return 0
}

func (r *jksReader) utf() string { return string(r.take(r.u16())) }

// cert reads one certificate (its type named in version 2) and returns its DER when it is X.509.
func (r *jksReader) cert(version int) ([]byte, error) {
	typ := "X.509"
	if version == 2 {
		typ = r.utf()
	}
	der := r.take(r.u32())
	if r.err != nil {
		return nil, r.err
	}
	if typ != "X.509" {
		return nil, nil
	}
	return der, nil
}

// decodeJKS returns the DER of the trusted certificates of a JKS store; private key entries are
// skipped.
func decodeJKS(b []byte) ([][]byte, error) {
	r := &jksReader{b: b}
	r.take(4)
	version := r.u32()
	if version != 1 && version != 2 {
		return nil, fmt.Errorf("JKS version %d", version)
	}
	n := r.u32()
	if n < 0 || n > maxEntries {
		return nil, fmt.Errorf("JKS store claims %d entries", n)
	}
	var out [][]byte
	for range n {
		tag := r.u32()
		r.utf()   // alias
		r.take(8) // time stamp
		switch tag {
		case tagTrusted:
			c, err := r.cert(version)
			if err != nil {
				return nil, err
			}
			if c != nil {
				out = append(out, c)
			}
		case tagPrivateKey:
			r.take(r.u32()) // the protected key
			chain := r.u32()
			if chain < 0 || chain > maxEntries {
				return nil, fmt.Errorf("JKS key entry claims %d certificates", chain)
			}
			for range chain {
				if _, err := r.cert(version); err != nil {
					return nil, err
				}
			}
		default:
			if r.err == nil {
				return nil, fmt.Errorf("JKS entry tag %d", tag)
			}
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	if len(r.b) != 20 {
		return nil, fmt.Errorf("JKS store: %d bytes after the entries, want a 20-byte digest", len(r.b))
	}
	return out, nil
}
