package scan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fuzzNames are the file names the fuzz target judges content as, one per rule family.
var fuzzNames = []string{"a.txt", ".env", ".env.example", ".npmrc", ".git/config", "sa.json", ".docker/config.json",
	".kube/config", "k.p12", "app.jks"}

// FuzzJudge checks the content rules on arbitrary bytes: no panic; findings that name the file, a line
// inside it, and a redacted preview; and the same findings, one line down, when a line is added above.
func FuzzJudge(f *testing.F) {
	g := newGen(30)
	for i, s := range []string{g.github(), g.githubPAT(), g.slack(), g.anthropic(), g.openAIProj(), g.awsKeyID(),
		"aws_secret_access_key = " + g.awsSecret(), g.pem(privateLabel("RSA")), g.googleKey(),
		"postgres://u:" + g.str(8, alnum) + "@localhost,db.prod.example/x", "API_KEY=" + g.str(24, alnum),
		"DATABASE_URL=postgres://u:" + "p@prod.example.com/db\nDB=postgres://admin:" + "password@10.0.0.5/app",
		"jdbc:sqlserver://sql.corp.io:1433;user=sa;" + "password=pw;x=y", "https://me@corp.io:" + "p@ss@[::1", "jdbc:oracle:thin:scott/" + "tiger@//db.corp.io:1521/svc"} {
		f.Add([]byte(s), uint8(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		name := fuzzNames[int(which)%len(fuzzNames)]
		c := classify(name)
		found := judge(name, c, data)
		lines := bytes.Count(data, []byte{'\n'}) + 1
		for _, fd := range found {
			if fd.Path != name || fd.Kind == "" || fd.Line < 0 || fd.Line > lines {
				t.Fatalf("bad finding %+v for %d lines", fd, lines)
			}
			if p := fd.Preview; p != "" && !strings.HasSuffix(p, "…") && !strings.Contains(p, ":…@") && !strings.Contains(p, "/…@") &&
				!strings.HasPrefix(p, "-----BEGIN ") {
				t.Fatalf("preview %q is not redacted", p)
			}
		}
		if len(found) >= maxPerFile || c.magic != magicNone || bytes.IndexByte(data, 0) >= 0 {
			return
		}
		shifted := judge(name, c, append([]byte("\n"), data...))
		for i := range found {
			if found[i].Line > 0 {
				found[i].Line++
			}
		}
		if diff := cmp.Diff(found, shifted); diff != "" {
			t.Fatalf("a line added above changed the findings (-want +got):\n%s", diff)
		}
	})
}

// FuzzScanEnv checks ScanEnv on arbitrary variables: no panic, at most one finding per variable, named
// after it, and never showing the whole value.
func FuzzScanEnv(f *testing.F) {
	g := newGen(31)
	f.Add("GH", g.github())
	f.Add("DATABASE_URL", "postgres://app:"+g.str(12, alnum)+"@db.prod.example/app")
	f.Add("NPM_TOKEN", g.str(36, alnum))
	f.Fuzz(func(t *testing.T, name, value string) {
		if name == "" || strings.Contains(name, "=") {
			return
		}
		found := ScanEnv([]string{name + "=" + value})
		if len(found) > 1 {
			t.Fatalf("%d findings for one variable", len(found))
		}
		for _, fd := range found {
			if fd.Env != name || fd.Path != "" || fd.Kind == "" {
				t.Fatalf("bad finding %+v", fd)
			}
			if len(value) >= 8 && strings.Contains(fd.Preview, value) {
				t.Fatalf("preview %q shows the value", fd.Preview)
			}
		}
	})
}
