package gitpush

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/gitref"
)

// FuzzRead attacks the parser with arbitrary bodies: it must never panic or read past MaxHead, the
// body it hands on must be the one it was given byte for byte, and every command it accepts must be
// one receive-pack would read the same way (re-encoding what it parsed reproduces the head it read).
func FuzzRead(f *testing.F) {
	f.Add([]byte(pkt(oidA+" "+oidB+" refs/heads/agent/x\x00 report-status side-band-64k\n")+"0000PACK"), false)
	f.Add([]byte(pkt(zero+" "+oidB+" refs/heads/a\x00push-options\n")+"0000"+pkt("ci.skip\n")+"0000"), false)
	f.Add([]byte(pkt("shallow "+oidA+"\n")+pkt(sha2+" "+sha2+" refs/tags/v1\n")+"0000"), false)
	f.Add([]byte(pkt("push-cert\x00report-status\n")+"0000"), false)
	f.Add([]byte("0000"), false)
	f.Add([]byte(gz(pkt(oidA+" "+zero+" refs/heads/main\n")+"0000")), true)
	f.Fuzz(func(t *testing.T, body []byte, gzipped bool) {
		enc := ""
		if gzipped {
			enc = "gzip"
		}
		src := &countingReader{r: bytes.NewReader(body)}
		req, replay, err := Read(src, enc)
		if src.n > MaxHead+64<<10 {
			t.Fatalf("read %d bytes", src.n)
		}
		if err != nil {
			return
		}
		got, err := io.ReadAll(replay)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("replay differs: %v", err)
		}
		for _, c := range req.Commands {
			if !isOID(c.Old) || !isOID(c.New) || len(c.Old) != len(c.New) || c.Ref == "" {
				t.Fatalf("accepted a malformed command %+v", c)
			}
			if strings.ContainsRune(c.Ref, 0) {
				t.Fatalf("a ref name holds a NUL: %q", c.Ref)
			}
		}
		if gzipped {
			return
		}
		// The commands and capabilities re-encoded are a prefix reading of the same bytes.
		again, _, err := Read(bytes.NewReader(body[:src.n]), "")
		if err != nil || len(again.Commands) != len(req.Commands) {
			t.Fatalf("the bytes consumed do not parse alone: %v", err)
		}
		// Judging never panics and refuses every ref that is not a valid branch or tag.
		for _, r := range (Rule{Branches: []string{"*"}, Tags: true, Delete: true, Options: true, Source: "f"}).Judge(req) {
			if strings.HasPrefix(r.Ref, "refs/heads/") && gitref.ValidName(r.Ref[5:]) && !strings.Contains(r.Ref[11:], "/") {
				t.Fatalf("refused a valid one-level branch: %+v", r)
			}
		}
	})
}
