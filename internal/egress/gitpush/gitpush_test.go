package gitpush

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

const (
	zero = "0000000000000000000000000000000000000000"
	oidA = "1111111111111111111111111111111111111111"
	oidB = "2222222222222222222222222222222222222222"
	sha2 = "3333333333333333333333333333333333333333333333333333333333333333"
)

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func TestRead(t *testing.T) {
	const pack = "PACK\x00\x00\x00\x02rest-of-pack"
	caps := "\x00 report-status side-band-64k agent=git/2.39.5\n"
	for _, tc := range []struct {
		name     string
		body     string
		encoding string
		want     []Command
		caps     []string
		options  []string
		err      string
	}{
		{name: "one update", body: pkt(oidA+" "+oidB+" refs/heads/agent/x"+caps) + "0000" + pack,
			want: []Command{{oidA, oidB, "refs/heads/agent/x"}}, caps: []string{"report-status", "side-band-64k", "agent=git/2.39.5"}},
		{name: "several, caps on the first", body: pkt(zero+" "+oidB+" refs/heads/a"+caps) + pkt(oidA+" "+zero+" refs/tags/v1\n") + "0000" + pack,
			want: []Command{{zero, oidB, "refs/heads/a"}, {oidA, zero, "refs/tags/v1"}}},
		{name: "caps on a later line count too", body: pkt(oidA+" "+oidB+" refs/heads/a\n") + pkt(oidA+" "+oidB+" refs/heads/b\x00report-status\n") + "0000",
			want: []Command{{oidA, oidB, "refs/heads/a"}, {oidA, oidB, "refs/heads/b"}}, caps: []string{"report-status"}},
		{name: "no newline", body: pkt(oidA+" "+oidB+" refs/heads/a") + "0000", want: []Command{{oidA, oidB, "refs/heads/a"}}},
		{name: "sha256", body: pkt(sha2+" "+sha2+" refs/heads/a\x00object-format=sha256\n") + "0000", want: []Command{{sha2, sha2, "refs/heads/a"}}},
		{name: "shallow first", body: pkt("shallow "+oidA+"\n") + pkt(oidA+" "+oidB+" refs/heads/a\n") + "0000", want: []Command{{oidA, oidB, "refs/heads/a"}}},
		{name: "probe: flush alone", body: "0000"},
		{name: "push options", body: pkt(oidA+" "+oidB+" refs/heads/a\x00push-options\n") + "0000" + pkt("ci.skip\n") + pkt("merge_request.create\n") + "0000" + pack,
			want: []Command{{oidA, oidB, "refs/heads/a"}}, options: []string{"ci.skip", "merge_request.create"}},
		// parse_feature_request separates features by isspace, not only " ": a tab or a CR before
		// push-options still turns them on in receive-pack, so they must be read (and judged) here.
		{name: "push options after a tab", body: pkt(oidA+" "+oidB+" refs/heads/a\x00report-status\tpush-options\n") + "0000" + pkt("merge_request.create\n") + "0000" + pack,
			want: []Command{{oidA, oidB, "refs/heads/a"}}, caps: []string{"report-status", "push-options"}, options: []string{"merge_request.create"}},
		{name: "push options after a CR", body: pkt(oidA+" "+oidB+" refs/heads/a\x00report-status\rpush-options\n") + "0000" + pkt("merge_request.create\n") + "0000" + pack,
			want: []Command{{oidA, oidB, "refs/heads/a"}}, options: []string{"merge_request.create"}},
		// The feature list is a C string to receive-pack: what follows a second NUL is not read.
		{name: "a second NUL ends the capabilities", body: pkt(oidA+" "+oidB+" refs/heads/a\x00report-status\x00 push-options\n") + "0000" + pack,
			want: []Command{{oidA, oidB, "refs/heads/a"}}, caps: []string{"report-status"}},
		{name: "gzip", encoding: "gzip", body: gz(pkt(oidA+" "+oidB+" refs/heads/main\n") + "0000" + pack), want: []Command{{oidA, oidB, "refs/heads/main"}}},
		{name: "x-gzip upper case", encoding: "X-GZIP", body: gz(pkt(oidA+" "+oidB+" refs/heads/main\n") + "0000"), want: []Command{{oidA, oidB, "refs/heads/main"}}},

		{name: "deflate", encoding: "deflate", body: "0000", err: ErrEncoding.Error()},
		{name: "gzip that is not", encoding: "gzip", body: pkt(oidA+" "+oidB+" refs/heads/main\n") + "0000", err: "not gzip"},
		{name: "signed push", body: pkt("push-cert\x00report-status\n") + pkt("certificate version 0.1\n") + "0000", err: "signed pushes"},
		{name: "truncated", body: pkt(oidA + " " + oidB + " refs/heads/a\n"), err: "ends before"},
		{name: "truncated inside a line", body: pkt(oidA + " " + oidB + " refs/heads/a\n")[:20], err: "ends before"},
		{name: "empty body", body: "", err: "ends before"},
		{name: "bad length", body: "00zz", err: "malformed pkt-line length"},
		{name: "delim packet", body: "0001", err: "unexpected pkt-line"},
		{name: "length 3", body: "0003", err: "unexpected pkt-line"},
		{name: "too long a packet", body: "fff5" + strings.Repeat("x", 0xfff1), err: "longer than git allows"},
		{name: "short old oid", body: pkt(oidA[:39]+" "+oidB+" refs/heads/a\n") + "0000", err: "malformed ref update"},
		{name: "mixed lengths", body: pkt(oidA+" "+sha2+" refs/heads/a\n") + "0000", err: "malformed ref update"},
		{name: "upper-case hex", body: pkt(strings.Repeat("A", 40)+" "+oidB+" refs/heads/a\n") + "0000", err: "malformed ref update"},
		{name: "no ref", body: pkt(oidA+" "+oidB+" \n") + "0000", err: "malformed ref update"},
		{name: "empty line", body: "0004" + "0000", err: "malformed ref update"},
		{name: "bad shallow", body: pkt("shallow "+oidA+"x\n") + "0000", err: "malformed shallow"},
		{name: "push options cut short", body: pkt(oidA+" "+oidB+" refs/heads/a\x00push-options\n") + "0000" + pkt("x\n"), err: "push options"},
		{name: "too many commands", body: strings.Repeat(pkt(oidA+" "+oidB+" refs/heads/a\n"), MaxHead/96+1) + "0000", err: ErrTooLarge.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, replay, err := Read(strings.NewReader(tc.body), tc.encoding)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(req.Commands) != fmt.Sprint(tc.want) {
				t.Errorf("commands %v, want %v", req.Commands, tc.want)
			}
			if tc.caps != nil && fmt.Sprint(req.Capabilities) != fmt.Sprint(tc.caps) {
				t.Errorf("capabilities %q, want %q", req.Capabilities, tc.caps)
			}
			if fmt.Sprint(req.PushOptions) != fmt.Sprint(tc.options) {
				t.Errorf("push options %q, want %q", req.PushOptions, tc.options)
			}
			got, err := io.ReadAll(replay)
			if err != nil || string(got) != tc.body {
				t.Errorf("the replayed body differs from the one sent (%v)", err)
			}
		})
	}
}

// TestReadStopsAtTheCommands: Read takes no more of the body than the commands (the pack is left for
// the upstream), and never more than MaxHead of an endless one.
func TestReadStopsAtTheCommands(t *testing.T) {
	head := pkt(oidA+" "+oidB+" refs/heads/a\n") + "0000"
	src := &countingReader{r: io.MultiReader(strings.NewReader(head), endless{})}
	if _, _, err := Read(src, ""); err != nil {
		t.Fatal(err)
	}
	if src.n != len(head) {
		t.Fatalf("read %d bytes, want %d", src.n, len(head))
	}
	endlessLines := &countingReader{r: repeat(pkt(oidA + " " + oidB + " refs/heads/a\n"))}
	if _, _, err := Read(endlessLines, ""); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("an endless list of commands: %v", err)
	}
	if endlessLines.n > MaxHead {
		t.Fatalf("read %d bytes of an endless body, more than MaxHead", endlessLines.n)
	}
	gzEndless := &countingReader{r: strings.NewReader(gz(strings.Repeat(pkt(oidA+" "+oidB+" refs/heads/a\n"), 4*MaxHead/96)))}
	if _, _, err := Read(gzEndless, "gzip"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a gzip body of too many commands: %v", err)
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

func repeat(s string) io.Reader {
	off := 0
	return readerFunc(func(p []byte) (int, error) {
		n := 0
		for n < len(p) {
			c := copy(p[n:], s[off:])
			n += c
			off = (off + c) % len(s)
		}
		return n, nil
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return b.String()
}

func TestJudge(t *testing.T) {
	r := Rule{Branches: []string{"agent/*", "fix-?"}, Source: "network.git[0]"}
	open := Rule{Branches: []string{"*", "*/*"}, Tags: true, Delete: true, Options: true, Source: "network.git[1]"}
	for _, tc := range []struct {
		cmd        Command
		rule       Rule
		reason     string // "" = allowed
		fix        string
		openReason string
	}{
		{cmd: Command{oidA, oidB, "refs/heads/agent/x"}},
		{cmd: Command{zero, oidB, "refs/heads/agent/new"}},
		{cmd: Command{oidA, oidB, "refs/heads/fix-1"}},
		{cmd: Command{oidA, oidB, "refs/heads/main"}, reason: "branch main is not in network.git[0].push.branches (which allows the branches agent/*, fix-?)", fix: `add "main" to network.git[0].push.branches`},
		{cmd: Command{oidA, oidB, "refs/heads/agent/x/y"}, reason: "branch agent/x/y is not in", fix: `add "agent/x/y"`, openReason: "branch agent/x/y is not in"},
		{cmd: Command{oidA, oidB, "refs/heads/agent"}, reason: "branch agent is not in"},
		{cmd: Command{oidA, zero, "refs/heads/agent/x"}, reason: "deleting branch agent/x is not allowed by network.git[0]", fix: "set network.git[0].push.delete: true"},
		{cmd: Command{zero, oidA, "refs/tags/v1"}, reason: "pushing tag v1 is not allowed by network.git[0]", fix: "set network.git[0].push.tags: true"},
		{cmd: Command{oidA, zero, "refs/tags/v1"}, reason: "pushing tag v1 is not allowed"},
		{cmd: Command{oidA, oidB, "refs/notes/commits"}, reason: "neither a branch nor a tag", openReason: "neither a branch nor a tag"},
		{cmd: Command{oidA, oidB, "refs/for/main"}, reason: "neither a branch nor a tag", openReason: "neither a branch nor a tag"},
		{cmd: Command{oidA, oidB, "HEAD"}, reason: "not a valid ref name", openReason: "not a valid ref name"},
		{cmd: Command{oidA, oidB, "refs/heads/agent/../main"}, reason: "not a valid ref name", openReason: "not a valid ref name"},
		{cmd: Command{oidA, oidB, "refs/heads/agent/x\nrefs/heads/main"}, reason: "not a valid ref name", openReason: "not a valid ref name"},
		{cmd: Command{oidA, oidB, "refs/heads/agent/x.lock"}, reason: "not a valid ref name", openReason: "not a valid ref name"},
		{cmd: Command{oidA, oidB, "refs/heads//agent"}, reason: "not a valid ref name", openReason: "not a valid ref name"},
		{cmd: Command{oidA, oidB, "refs/heads/agent/x\x00"}, reason: "not a valid ref name", openReason: "not a valid ref name"},
	} {
		check := func(rule Rule, reason, fix string) {
			got := rule.Judge(&Request{Commands: []Command{tc.cmd}})
			if reason == "" {
				if len(got) != 0 {
					t.Errorf("%s %v: refused: %+v", rule.Source, tc.cmd, got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0].Reason, reason) || !strings.Contains(got[0].Fix, fix) ||
				strings.Contains(fix, ".push.") && !strings.Contains(fix, got[0].Rule) || fix == "" && got[0].Fix == "" && got[0].Rule != rule.Source {
				t.Errorf("%s %v: got %+v, want reason %q fix %q", rule.Source, tc.cmd, got, reason, fix)
			}
		}
		check(r, tc.reason, tc.fix)
		check(open, tc.openReason, "")
	}
	// One refused command among allowed ones is reported alone; the caller refuses the push.
	got := r.Judge(&Request{Commands: []Command{{oidA, oidB, "refs/heads/agent/a"}, {oidA, oidB, "refs/heads/main"}, {oidA, oidB, "refs/heads/agent/b"}}})
	if len(got) != 1 || got[0].Ref != "refs/heads/main" || got[0].Rule != "network.git[0].push.branches" {
		t.Fatalf("refused %+v", got)
	}
	// Push options refuse every command unless the rule allows them.
	withOptions := &Request{Commands: []Command{{oidA, oidB, "refs/heads/agent/a"}}, PushOptions: []string{"merge_request.create"}}
	if got := r.Judge(withOptions); len(got) != 1 || got[0].Rule != "network.git[0].push.options" || got[0].Fix != "set network.git[0].push.options: true" {
		t.Fatalf("push options: %+v", got)
	}
	if got := open.Judge(withOptions); len(got) != 0 {
		t.Fatalf("push options refused without a reason: %+v", got)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, path, query string
		repo                string
		s                   Service
	}{
		{"GET", "/acme/app.git/info/refs", "service=git-upload-pack", "acme/app", Fetch},
		{"POST", "/acme/app.git/git-upload-pack", "", "acme/app", Fetch},
		{"GET", "/acme/app/info/refs", "service=git-receive-pack", "acme/app", PushRefs},
		{"GET", "/Acme/App.git/info/refs", "service=git-receive-pack", "acme/app", PushRefs},
		{"POST", "/acme/app.git/git-receive-pack", "", "acme/app", Push},
		{"POST", "/group/sub/app.git/git-receive-pack", "", "group/sub/app", Push},
		{"POST", "/acme/app.git/git-receive-pack", "x=1", "acme/app", Push},
		{"GET", "/acme/app.git/info/refs", "service=git-upload-pack&service=git-receive-pack", "acme/app", PushOther},
		{"GET", "/acme/app.git/info/refs", "service=GIT-RECEIVE-PACK", "acme/app", PushOther},
		{"GET", "/acme/app.git/info/refs", "service=git-receive%2dpack", "acme/app", PushRefs},
		{"POST", "/acme/app.git/git-upload-pack", "service=git-receive-pack", "acme/app", PushOther},
		{"POST", "/acme/app.git/git-receive-pack/", "", "acme/app", PushOther},
		{"PUT", "/acme/app.git/git-receive-pack", "", "acme/app", PushOther},
		{"POST", "/acme/app.git/GIT-RECEIVE-PACK", "", "acme/app", PushOther},
		{"GET", "/acme/app.git/info/refs", "", "", NotGit},
		{"GET", "/acme/app.git/HEAD", "", "", NotGit},
		{"GET", "/acme/app", "", "", NotGit},
	} {
		repo, s := Classify(tc.method, tc.path, tc.query)
		if repo != tc.repo || s != tc.s {
			t.Errorf("Classify(%s %s?%s) = %q, %d; want %q, %d", tc.method, tc.path, tc.query, repo, s, tc.repo, tc.s)
		}
	}
}

func TestRefusal(t *testing.T) {
	req := &Request{Commands: []Command{{oidA, oidB, "refs/heads/agent/x"}, {oidA, oidB, "refs/heads/main"}}, Capabilities: []string{"report-status"}}
	got := string(Refusal(req, map[string]string{"refs/heads/main": "not\nallowed"}, "refused with the rest", "ignored"))
	want := pkt("unpack ok\n") + pkt("ng refs/heads/agent/x refused with the rest\n") + pkt("ng refs/heads/main not allowed\n") + "0000"
	if got != want {
		t.Fatalf("plain report:\n%q\nwant\n%q", got, want)
	}
	req.Capabilities = []string{"report-status-v2", "side-band-64k"}
	got = string(Refusal(req, nil, "no", "cordon: one\ncordon: two\n"))
	inner := pkt("unpack ok\n") + pkt("ng refs/heads/agent/x no\n") + pkt("ng refs/heads/main no\n") + "0000"
	want = pkt("\x02cordon: one\n") + pkt("\x02cordon: two\n") + pkt("\x01"+inner) + "0000"
	if got != want {
		t.Fatalf("side-band report:\n%q\nwant\n%q", got, want)
	}
	if !req.Reports() || (&Request{Capabilities: []string{"side-band-64k"}}).Reports() {
		t.Fatal("Reports")
	}
}
