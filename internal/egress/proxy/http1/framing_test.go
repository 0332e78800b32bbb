package http1

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzFraming from the table tests")

// strictRequest is one request as the strict reader reads it from a stream.
type strictRequest struct {
	req  *Request
	body []byte
}

// readStrict reads requests from data with ReadHead, ParseRequest and ChunkedReader until the stream
// ends or one is refused. refused is the refusal (wrapping ErrMalformed); a stream cut short in the
// middle of a request ends it without one.
func readStrict(data []byte) (reqs []strictRequest, refused error) {
	br := bufio.NewReader(bytes.NewReader(data))
	for {
		raw, err := ReadHead(br, MaxHead)
		if err == nil {
			var r *Request
			if r, err = ParseRequest(raw); err == nil {
				var body []byte
				switch {
				case r.Chunked:
					body, err = io.ReadAll(NewChunkedReader(br))
				case r.ContentLength > 0:
					body = make([]byte, r.ContentLength)
					_, err = io.ReadFull(br, body)
				}
				if err == nil {
					reqs = append(reqs, strictRequest{r, body})
					continue
				}
			}
		}
		if errors.Is(err, ErrMalformed) {
			return reqs, err
		}
		return reqs, nil // EOF, or cut short
	}
}

// frame runs a Framer over data, fed in pieces of the given sizes (cycled), and returns how many
// whole requests it passed and its refusal, if any.
func frame(data []byte, pieces []int) (heads []*Request, passed []byte, refused error) {
	var f Framer
	var buf []byte
	p := 0
	for len(data) > 0 || len(buf) > 0 {
		n := pieces[p%len(pieces)]
		p++
		n = min(max(n, 1), len(data))
		buf = append(buf, data[:n]...)
		data = data[n:]
		for {
			k, err := f.Next(buf)
			if err != nil {
				return heads, passed, err
			}
			if k == 0 {
				break
			}
			if l := f.Last(); l != nil && (len(heads) == 0 || heads[len(heads)-1] != l) {
				heads = append(heads, l)
			}
			passed = append(passed, buf[:k]...)
			buf = buf[k:]
		}
		if len(data) == 0 {
			break
		}
	}
	return heads, passed, nil
}

// FuzzFraming holds the strict reader to net/http's reading of the same bytes: for every request the
// strict reader accepts from a stream, http.ReadRequest must read the same method, target, version,
// Host, header fields, keep-alive and body, and stop at the same byte, so the next request starts at
// the same place for both. A stream the strict reader refuses is not forwarded, so what net/http makes
// of it does not matter. The Framer, fed the same bytes in pieces, must pass the same requests and
// refuse the same streams.
func FuzzFraming(f *testing.F) {
	for _, c := range framingCases {
		f.Add([]byte(c.in), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, piece uint8) {
		reqs, refused := readStrict(data)
		if refused != nil && !errors.Is(refused, ErrMalformed) {
			t.Fatalf("refusal %v does not wrap ErrMalformed", refused)
		}
		gbr := bufio.NewReader(bytes.NewReader(data))
		for i, s := range reqs {
			g, err := http.ReadRequest(gbr)
			if err != nil {
				t.Fatalf("request %d: the gateway accepts what net/http refuses (%v):\n%q", i, err, s.req.Raw)
			}
			body, err := io.ReadAll(g.Body)
			if err != nil {
				t.Fatalf("request %d: net/http cannot read the body the gateway read (%v):\n%q", i, err, data)
			}
			if !bytes.Equal(body, s.body) {
				t.Fatalf("request %d: body %q vs net/http %q", i, s.body, body)
			}
			compare(t, i, s.req, g)
		}
		heads, _, frefused := frame(data, []int{int(piece), 7, 1, 300})
		if (frefused != nil) != (refused != nil) {
			t.Fatalf("Framer refusal %v, strict reader %v:\n%q", frefused, refused, data)
		}
		if refused == nil && len(heads) < len(reqs) || len(heads) > len(reqs)+1 {
			t.Fatalf("Framer passed %d heads, strict reader %d requests:\n%q", len(heads), len(reqs), data)
		}
		for i := range min(len(heads), len(reqs)) {
			if !bytes.Equal(heads[i].Raw, reqs[i].req.Raw) {
				t.Fatalf("head %d: Framer %q, strict reader %q", i, heads[i].Raw, reqs[i].req.Raw)
			}
		}
	})
}

// compare checks net/http's reading of one request head against the strict reader's.
func compare(t *testing.T, i int, r *Request, g *http.Request) {
	t.Helper()
	fail := func(what string, ours, theirs any) {
		t.Fatalf("request %d: %s %v vs net/http %v:\n%q", i, what, ours, theirs, r.Raw)
	}
	if g.Method != r.Method {
		fail("method", r.Method, g.Method)
	}
	if g.RequestURI != r.Target {
		fail("target", r.Target, g.RequestURI)
	}
	if g.Proto != r.Version {
		fail("version", r.Version, g.Proto)
	}
	want := http.Header{}
	var host string
	var trailer []string // the names a chunked request declares, which net/http moves to its Trailer
	for _, f := range r.Fields {
		k := textproto.CanonicalMIMEHeaderKey(f.Name)
		switch {
		case k == "Host":
			host = f.Value
		case k == "Transfer-Encoding" && r.Chunked:
		case k == "Trailer" && r.Chunked:
			for name := range strings.SplitSeq(f.Value, ",") {
				if name = strings.Trim(name, " \t"); name != "" {
					trailer = append(trailer, textproto.CanonicalMIMEHeaderKey(name))
				}
			}
		default:
			want[k] = append(want[k], f.Value)
		}
	}
	var theirs []string
	for name := range g.Trailer {
		theirs = append(theirs, name)
	}
	slices.Sort(trailer)
	slices.Sort(theirs)
	if !slices.Equal(slices.Compact(trailer), theirs) {
		fail("declared trailer", trailer, theirs)
	}
	if want.Get("Pragma") == "no-cache" && want.Get("Cache-Control") == "" && r.Version == "HTTP/1.1" {
		want.Set("Cache-Control", "no-cache")
	}
	if fmt.Sprint(want) != fmt.Sprint(g.Header) {
		fail("fields", want, g.Header)
	}
	if r.Form != "absolute" && g.Host != host {
		fail("Host", host, g.Host)
	}
	if r.Form == "absolute" && !strings.EqualFold(strings.TrimSuffix(g.URL.Hostname(), "."), r.URI.Host) && "["+g.URL.Hostname()+"]" != "["+r.URI.Host+"]" {
		fail("URI host", r.URI.Host, g.URL.Host)
	}
	chunked := len(g.TransferEncoding) == 1 && g.TransferEncoding[0] == "chunked"
	if chunked != r.Chunked || len(g.TransferEncoding) > 1 {
		fail("chunked", r.Chunked, g.TransferEncoding)
	}
	if !r.Chunked && max(r.ContentLength, 0) != g.ContentLength {
		fail("Content-Length", r.ContentLength, g.ContentLength)
	}
	if g.Close != r.Close {
		fail("close", r.Close, g.Close)
	}
}

// framingCases are streams the strict reader must pass whole (ok) or refuse.
var framingCases = []struct {
	name string
	in   string
	ok   bool
}{
	{"two requests", "GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.test\r\n\r\n", true},
	{"POST with Content-Length", "POST /p HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: a.test\r\n\r\n", true},
	{"chunked", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", true},
	{"chunk extensions", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b;c;d=\"x;y\"\r\nhello\r\n0\r\n\r\n", true},
	{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
	{"Connection: close", "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", true},

	{"CL and TE", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
	{"TE and CL", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", false},
	{"two Content-Lengths", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd", false},
	{"Content-Length list", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4, 4\r\n\r\nabcd", false},
	{"xchunked", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", false},
	{"chunked, identity", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", false},
	{"two Transfer-Encodings", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
	{"Transfer-Encoding with a space before the colon", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", false},
	{"Transfer-Encoding with a vertical tab", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n", false},
	{"bare LF in the head", "GET / HTTP/1.1\nHost: a.test\n\n", false},
	{"bare LF ending the head", "GET / HTTP/1.1\r\nHost: a.test\r\n\n", false},
	{"obs-fold", "GET / HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\n Host: evil.test\r\n\r\n", false},
	{"bare LF in a chunk line", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", false},
	{"bare CR in a chunk line", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\rx\r\nhello\r\n0\r\n\r\n", false},
	{"chunk size with a sign", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n", false},
	{"chunk size 0x", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", false},
	{"chunk size too long", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000005\r\nhello\r\n0\r\n\r\n", false},
	{"blank before a chunk extension", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5 ;a\r\nhello\r\n0\r\n\r\n", false},
	{"bad chunk extension", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"x\r\nhello\r\n0\r\n\r\n", false},
	{"chunk without CRLF after it", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", false},
	{"trailer fields", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nHost: evil.test\r\n\r\n", false},
	{"chunked declaring trailers", "POST / HTTP/1.1\r\nHost: a.test\r\nTrailer: X-Sum, x-other,\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
	{"Trailer naming Content-Length", "POST / HTTP/1.1\r\nHost: a.test\r\nTrailer: Content-Length\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
	{"second request malformed", "GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: a.test\r\nHost: evil.test\r\n\r\n", false},
}

func TestFraming(t *testing.T) {
	for _, tt := range framingCases {
		t.Run(tt.name, func(t *testing.T) {
			writeSeed(t, tt.name, tt.in)
			reqs, refused := readStrict([]byte(tt.in))
			for _, pieces := range [][]int{{1}, {3, 1}, {len(tt.in)}} {
				heads, passed, frefused := frame([]byte(tt.in), pieces)
				if (frefused == nil) != tt.ok {
					t.Errorf("Framer (pieces %v): refusal %v", pieces, frefused)
				}
				if tt.ok && string(passed) != tt.in {
					t.Errorf("Framer passed %q", passed)
				}
				if tt.ok && len(heads) != len(reqs) {
					t.Errorf("Framer passed %d heads, strict reader read %d requests", len(heads), len(reqs))
				}
			}
			if (refused == nil) != tt.ok {
				t.Fatalf("strict reader: refusal %v", refused)
			}
		})
	}
}

func TestCopyChunkedReencodes(t *testing.T) {
	in := "5;ext=1\r\nhello\r\n000A\r\n0123456789\r\n0\r\n\r\nNEXT"
	br := bufio.NewReader(strings.NewReader(in))
	var out bytes.Buffer
	n, err := CopyChunked(&out, br, make([]byte, 64))
	if err != nil || n != int64(out.Len()) {
		t.Fatalf("CopyChunked: %d, %v", n, err)
	}
	// What goes upstream is the gateway's own encoding of the same bytes.
	decoded, err := io.ReadAll(NewChunkedReader(bufio.NewReader(&out)))
	if err != nil || string(decoded) != "hello0123456789" {
		t.Fatalf("re-encoded body decodes to %q, %v", decoded, err)
	}
	if strings.Contains(out.String(), "ext") || strings.Contains(out.String(), "000A") {
		t.Errorf("client's chunk lines forwarded: %q", out.String())
	}
	if rest, _ := io.ReadAll(br); string(rest) != "NEXT" {
		t.Errorf("read past the body: %q left", rest)
	}
}

// writeSeed stores one input in FuzzFraming's seed corpus (only with -update-seeds).
func writeSeed(t *testing.T, name, data string) {
	t.Helper()
	if !*updateSeeds {
		return
	}
	slug := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(name))
	dir := filepath.Join("testdata", "fuzz", "FuzzFraming")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbyte('\\x01')\n", data)
	if err := os.WriteFile(filepath.Join(dir, slug), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
