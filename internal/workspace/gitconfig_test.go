package workspace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// configCases are git config files that trip naive parsers; each is checked against git itself.
var configCases = []string{
	"[core]\n\thooksPath = /x\n",
	"[core] hooksPath = /x\n",
	"[CORE]\n\tHooksPath=/x\n",
	"[core]\n\tpager = \"less\" ; comment\n\teditor = vi # c\n",
	"[core]\n\tsshCommand = ssh \\\n\t-i key\n",
	"[alias]\n\tst = \"!sh -c \\\"x\\\"\"\n",
	"[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n",
	"[filter \"Mixed.Case\"]\n\tsmudge = x\n",
	"[includeIf \"gitdir:~/w/\"]\n\tpath = x.inc\n",
	"[remote.origin]\n\turl = ext::sh\n",
	"[core]\n\tbare\n\tfilemode = false\n",
	"\xef\xbb\xbf[core]\n\tfsmonitor = true\n",
	"# only a comment\n; another\n",
	"[a]\n\tk = \"  spaced  \"  \n",
	"[a]\n\tk = x\t\ty  \n",
	"[a \"sub\\\"q\"]\n\tk = v\n",
	"[a]\n\tk = \"\" x\n",
	"[a]k=1\n[b]j=2",
}

// gitList is what `git config --list` makes of a file, as key=value lines.
func gitList(t *testing.T, data string) (string, bool) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "config", "--file", f, "--list")
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent"}
	out, err := cmd.Output()
	return string(out), err == nil
}

func ourList(data string) (string, bool) {
	es, err := parseGitConfig([]byte(data))
	if err != nil {
		return "", false
	}
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.Key())
		if !e.NoValue {
			b.WriteString("=" + e.Value)
		}
		b.WriteString("\n")
	}
	return b.String(), true
}

func TestGitConfigMatchesGit(t *testing.T) {
	bad := []string{"[core\n", "[core]\n\tk = \"open\n", "k = v\n", "[core]\n\tk = \\q\n", "[core]\n\t1k = v\n", "[]\nk=v\n", "[a b]\n"}
	for _, c := range append(configCases, bad...) {
		want, wok := gitList(t, c)
		got, gok := ourList(c)
		if wok != gok || got != want {
			t.Errorf("config %q:\n git  (ok=%v): %q\n ours (ok=%v): %q", c, wok, want, gok, got)
		}
	}
}

func TestConfigRules(t *testing.T) {
	for _, tc := range []struct {
		config string
		risky  bool
	}{
		{"[core]\n\thooksPath = x\n", true},
		{"[core \"x\"]\n\thooksPath = x\n", false}, // core.x.hookspath is not a variable git reads
		{"[alias]\n\tst = status\n", false},
		{"[alias]\n\tst = \"  !sh\"\n", true},
		{"[remote \"o\"]\n\turl = https://x\n", false},
		{"[remote \"o\"]\n\turl = EXT::sh -c x\n", true},
		{"[submodule \"s\"]\n\tupdate = rebase\n", false},
		{"[submodule \"s\"]\n\tupdate = !x\n", true},
		{"[user]\n\tname = a\n", false},
		{"[filter \"x\"]\n\tprocess = y\n", true},
		{"[credential \"https://h\"]\n\thelper = y\n", true},
		{"[protocol \"ext\"]\n\tallow = always\n", true},
	} {
		es, err := parseGitConfig([]byte(tc.config))
		if err != nil {
			t.Fatalf("%q: %v", tc.config, err)
		}
		risky := false
		for _, e := range es {
			for _, r := range configRules {
				risky = risky || r.match(e)
			}
		}
		if risky != tc.risky {
			t.Errorf("%q: risky=%v, want %v", tc.config, risky, tc.risky)
		}
	}
}

func TestGitAttributes(t *testing.T) {
	as, err := parseGitAttributes([]byte("# c\n*.go diff=golang -text\n\"a b\" filter=x\n[attr]m merge=y\n  *.c\tfoo=bar !baz\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range as {
		got = append(got, a.Pattern+" "+a.Name+"="+a.Value)
	}
	want := "*.go diff=golang|\"a b\" filter=x|[attr]m merge=y|*.c foo=bar"
	if strings.Join(got, "|") != want {
		t.Errorf("got %q\nwant %q", strings.Join(got, "|"), want)
	}
	if _, err := parseGitAttributes([]byte("\"open filter=x\n")); err == nil {
		t.Error("unterminated quoted pattern accepted")
	}
}

// FuzzGitConfig checks that the parser never panics and that, where git accepts a file, we read the
// same variables as git (the guard's verdict is only as good as that).
func FuzzGitConfig(f *testing.F) {
	for _, c := range configCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, data string) {
		got, ok := ourList(data)
		if !ok || testing.Short() {
			return
		}
		if want, wok := gitList(t, data); wok && got != want && !strings.ContainsAny(data, "\x00\r") {
			t.Errorf("config %q:\n git:  %q\n ours: %q", data, want, got)
		}
	})
}

// FuzzGitAttributes checks that the parser never panics and never loses a driver assignment that a
// plain field split would see.
func FuzzGitAttributes(f *testing.F) {
	f.Add("*.go filter=x\n")
	f.Add("\"a\\\" b\" diff=y\n[attr]m merge=z\n")
	f.Fuzz(func(t *testing.T, data string) {
		as, err := parseGitAttributes([]byte(data))
		if err != nil {
			return
		}
		for _, a := range as {
			if a.Name == "" && a.Value == "" && a.Pattern == "" {
				t.Errorf("empty attribute from %q", data)
			}
		}
	})
}
