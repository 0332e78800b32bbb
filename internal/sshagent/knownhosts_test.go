package sshagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKnownHosts: only lines naming an allowed host and port are kept, plain or hashed (hashed by
// ssh-keygen -H, the real tool), negations and wildcards left out.
func TestKnownHosts(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte(`# comment
git.test ssh-ed25519 AAAAgit
[git.test]:2222 ssh-ed25519 AAAAgitport
other.test,git.test ssh-ed25519 AAAAboth
secret.test ssh-ed25519 AAAAsecret
*.test ssh-ed25519 AAAAwild
!git.test,other.test ssh-ed25519 AAAAnegated
@cert-authority git.test ssh-ed25519 AAAAca
`), 0o644)
	hashed := filepath.Join(dir, "hashed")
	os.WriteFile(hashed, []byte("git.test ssh-ed25519 AAAAhashed\nsecret.test ssh-ed25519 AAAAhashedsecret\n"), 0o644)
	if _, err := exec.LookPath("ssh-keygen"); err == nil {
		if out, err := exec.Command("ssh-keygen", "-H", "-f", hashed).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen -H: %v\n%s", err, out)
		}
		if b, _ := os.ReadFile(hashed); !strings.HasPrefix(string(b), "|1|") {
			t.Fatalf("not hashed: %s", b)
		}
	}
	got := string(KnownHosts([]string{plain, hashed, filepath.Join(dir, "missing")}, []Host{{"git.test", 22}}))
	for _, want := range []string{"AAAAgit\n", "AAAAboth", "AAAAca", "AAAAhashed\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"AAAAgitport", "AAAAsecret", "AAAAwild", "AAAAnegated", "AAAAhashedsecret"} {
		if strings.Contains(got, not) {
			t.Errorf("kept %q:\n%s", not, got)
		}
	}
	if got := string(KnownHosts([]string{plain}, []Host{{"git.test", 2222}})); !strings.Contains(got, "AAAAgitport") || strings.Contains(got, "AAAAgit\n") {
		t.Errorf("port 2222:\n%s", got)
	}
}
