//go:build linux

package main

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sshServer is a real sshd on port 22 of a loopback address of its own (127.x.y.z), accepting the
// test process's user with one authorized key, so git over ssh works against a bare repository.
type sshServer struct {
	addr    string
	hostKey string // the public host key line ("ssh-ed25519 AAAA…")
	user    string
}

func startSSHD(t *testing.T, authorizedKey string) *sshServer {
	t.Helper()
	requireTool(t, "/usr/sbin/sshd")
	if os.Geteuid() != 0 {
		t.Skip("sshd on port 22 needs root (CI runs as root)")
	}
	dir := t.TempDir()
	var b [2]byte
	rand.Read(b[:])
	addr := fmt.Sprintf("127.%d.%d.%d", 100+b[0]%100, b[1], 2+b[0]%200)
	keygen(t, filepath.Join(dir, "host"), "host")
	pub, _ := os.ReadFile(filepath.Join(dir, "host.pub"))
	os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(authorizedKey), 0o600)
	conf := filepath.Join(dir, "sshd_config")
	os.WriteFile(conf, []byte(fmt.Sprintf(`ListenAddress %s:22
HostKey %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
`, addr, filepath.Join(dir, "host"), filepath.Join(dir, "authorized_keys"))), 0o600)
	os.MkdirAll("/run/sshd", 0o755) // sshd's privilege separation directory
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", conf)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Ready when it says it listens.
	sc := bufio.NewScanner(stderr)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "Server listening on") {
			break
		}
	}
	if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "Server listening on") {
		t.Fatalf("sshd did not start:\n%s", strings.Join(lines, "\n"))
	}
	go func() {
		for sc.Scan() {
		}
	}()
	f := strings.Fields(string(pub))
	return &sshServer{addr: addr, hostKey: f[0] + " " + f[1], user: "root"}
}

func keygen(t *testing.T, path, comment string) {
	t.Helper()
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
}

// TestGitOverSSH: git clone over ssh by name, through the transparent path to a real sshd on port
// 22, authenticating with a key of the caller's ssh-agent that the policy lists (sshAgent), the
// host key checked strictly against the known_hosts lines cordon shows inside. The attacks: the
// sandbox's agent lists only the listed key, will not sign with the unlisted one (which the caller's
// agent holds), and refuses to add or remove keys; the caller's agent is unchanged after, and the
// audit log has the signature and the refusals.
func TestGitOverSSH(t *testing.T) {
	requireTool(t, "git")
	requireTool(t, "ssh-agent")
	forEachTier(t, func(t *testing.T, h *harness) {
		keys := t.TempDir()
		keygen(t, filepath.Join(keys, "listed"), "listed@test")
		keygen(t, filepath.Join(keys, "unlisted"), "unlisted@test")
		listedPub, _ := os.ReadFile(filepath.Join(keys, "listed.pub"))
		srv := startSSHD(t, string(listedPub))

		// The repository, the test process's own (sshd runs git as that user).
		repo := filepath.Join(t.TempDir(), "repo.git")
		work := t.TempDir()
		for _, args := range [][]string{{"init", "-q", "--bare", repo}, {"-C", work, "init", "-q"}, {"-C", work, "-c", "user.name=t", "-c", "user.email=t@test", "commit", "-q", "--allow-empty", "-m", "over ssh " + h.canary}, {"-C", work, "push", "-q", repo, "HEAD:refs/heads/main"}} {
			if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		exec.Command("git", "-C", repo, "symbolic-ref", "HEAD", "refs/heads/main").Run()

		// The caller's agent, as the caller (ssh-agent answers only its own user), with both keys.
		sock := filepath.Join(h.base, "agent.sock")
		agent := h.command(nil, "ssh-agent", "-D", "-a", sock)
		stdout, _ := agent.StdoutPipe()
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
		bufio.NewReader(stdout).ReadString('\n') // "SSH_AUTH_SOCK=…": it listens
		for _, k := range []string{"listed", "unlisted"} {
			os.Chown(filepath.Join(keys, k), h.who.uid, h.who.gid)
			if r := run(t, h.command([]string{"SSH_AUTH_SOCK=" + sock}, "ssh-add", filepath.Join(keys, k)), ""); r.code != 0 {
				t.Fatalf("ssh-add: %s", r)
			}
		}
		h.writeFile(filepath.Join(h.home, ".ssh", "known_hosts"), "git.test "+srv.hostKey+"\nother.test "+srv.hostKey+"-other\n", 0o644)
		h.writeFile(filepath.Join(h.ws, "unlisted.pub"), mustRead(t, filepath.Join(keys, "unlisted.pub")), 0o644)

		pol := fmt.Sprintf(`network:
  allow: [{host: git.test, ports: [22]}]
  hosts: {git.test: %s}
credentials:
  - name: SSH_AUTH_SOCK
    from: {sshAgent: {keys: [listed@test]}}
`, srv.addr)
		script := fmt.Sprintf(`ssh-add -l; echo "LIST=$?"
cat /etc/ssh/ssh_known_hosts
echo data > /tmp/data
ssh-keygen -Y sign -n file -f unlisted.pub /tmp/data >/dev/null 2>&1; echo "SIGN-UNLISTED=$?"
ssh-keygen -q -t ed25519 -N '' -C new@sandbox -f /tmp/new && ssh-add /tmp/new; echo "ADD=$?"
ssh-add -D; echo "REMOVE=$?"
GIT_SSH_COMMAND='ssh -o StrictHostKeyChecking=yes -o BatchMode=yes' git clone -q %s@git.test:%s /tmp/clone && git -C /tmp/clone log --format=%%s
true`, srv.user, repo)
		r := h.sandboxed(pol, script, "SSH_AUTH_SOCK="+sock)
		if r.code != 0 {
			t.Fatalf("run failed:\n%s", r)
		}
		r.stdout += r.stderr // the summary
		for _, want := range []string{"listed@test", "LIST=0", "git.test " + srv.hostKey, "ADD=1", "REMOVE=1", "over ssh " + h.canary, "ssh-agent: 1 signatures"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("inside, want %q:\n%s", want, r)
			}
		}
		for _, not := range []string{"unlisted@test", "other.test", "SIGN-UNLISTED=0"} {
			if strings.Contains(r.stdout, not) {
				t.Errorf("inside, %q is visible:\n%s", not, r)
			}
		}
		all := run(t, h.command([]string{"SSH_AUTH_SOCK=" + sock}, "ssh-add", "-l"), "")
		if !strings.Contains(all.stdout, "listed@test") || !strings.Contains(all.stdout, "unlisted@test") || strings.Contains(all.stdout, "new@sandbox") {
			t.Errorf("the caller's agent changed:\n%s", all)
		}
		log := h.cordon(nil, "", "log", "last")
		for _, want := range []string{"ssh-agent", "sign", "add", "remove"} {
			if !strings.Contains(log.stdout, want) {
				t.Errorf("the audit log lacks %q:\n%s", want, log.stdout)
			}
		}
	})
}
