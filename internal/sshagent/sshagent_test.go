package sshagent

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (.ci/run installs openssh-client)", tool)
		}
	}
}

// hostAgent starts a real ssh-agent with two keys, "listed" and "unlisted", and returns its socket
// and the keys' files.
func hostAgent(t *testing.T) (sock, dir string) {
	t.Helper()
	dir = t.TempDir()
	sock = filepath.Join(dir, "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	for range 100 {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // the agent's socket appears once it listens
	}
	for _, name := range []string{"listed", "unlisted", "new"} {
		key := filepath.Join(dir, name)
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name+"@test", "-f", key).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
		if name != "new" {
			run(t, sock, "ssh-add", key)
			// Only the agent holds it now: ssh-keygen -Y sign -f KEY.pub cannot fall back to the file.
			os.Remove(key)
		}
	}
	return sock, dir
}

func run(t *testing.T, sock string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFilter attacks the sandbox's agent with the real clients: ssh-add -l lists only the listed
// key; a signature (ssh-keygen -Y sign) works with it and is refused with the unlisted one; adding a
// key, removing keys and locking the agent are refused. Each is checked against the caller's agent
// directly first (the control: there all of them work), and every use is reported.
func TestFilter(t *testing.T) {
	need(t, "ssh-agent", "ssh-add", "ssh-keygen")
	sock, dir := hostAgent(t)
	fp, _ := run(t, sock, "ssh-keygen", "-lf", filepath.Join(dir, "listed.pub"))
	listedFP := strings.Fields(fp)[1]
	for _, by := range []string{listedFP, "listed@test"} {
		t.Run(by, func(t *testing.T) {
			var mu sync.Mutex
			var uses []Use
			f, err := New(Config{
				Upstream: func() (net.Conn, error) { return net.Dial("unix", sock) },
				Keys:     []string{by},
				OnUse:    func(u Use) { mu.Lock(); uses = append(uses, u); mu.Unlock() },
			})
			if err != nil {
				t.Fatal(err)
			}
			inside := filepath.Join(t.TempDir(), "sandbox.sock")
			ln, err := net.Listen("unix", inside)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- f.Serve(ln) }()
			defer func() { ln.Close(); <-done }()

			data := filepath.Join(t.TempDir(), "data")
			os.WriteFile(data, []byte("to sign"), 0o644)
			sign := func(s, key string) error {
				_, err := run(t, s, "ssh-keygen", "-Y", "sign", "-n", "file", "-f", filepath.Join(dir, key+".pub"), data)
				os.Remove(data + ".sig")
				return err
			}
			list, err := run(t, inside, "ssh-add", "-l")
			if err != nil || !strings.Contains(list, "listed@test") || strings.Contains(list, "unlisted@test") {
				t.Errorf("ssh-add -l inside: %v\n%s", err, list)
			}
			if all, _ := run(t, sock, "ssh-add", "-l"); !strings.Contains(all, "unlisted@test") {
				t.Fatalf("control: the caller's agent lacks the unlisted key:\n%s", all)
			}
			if err := sign(inside, "listed"); err != nil {
				t.Errorf("signing with the listed key: %v", err)
			}
			if err := sign(sock, "unlisted"); err != nil {
				t.Fatalf("control: the caller's agent does not sign with the unlisted key: %v", err)
			}
			if err := sign(inside, "unlisted"); err == nil {
				t.Error("the sandbox signed with a key the policy does not list")
			}
			// ssh-keygen gives up once the listing lacks the key; a client that asks anyway:
			pubBytes, _ := os.ReadFile(filepath.Join(dir, "unlisted.pub"))
			unlisted, _, _, _, err := ssh.ParseAuthorizedKey(pubBytes)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("unix", inside)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := agent.NewClient(conn).Sign(unlisted, []byte("data")); err == nil {
				t.Error("a sign request for the unlisted key was answered")
			}
			conn.Close()
			for _, attack := range [][]string{{"ssh-add", filepath.Join(dir, "new")}, {"ssh-add", "-D"}, {"ssh-add", "-d", filepath.Join(dir, "listed.pub")}} {
				if out, err := run(t, inside, attack...); err == nil {
					t.Errorf("%v inside succeeded:\n%s", attack, out)
				}
			}
			if all, _ := run(t, sock, "ssh-add", "-l"); strings.Contains(all, "new@test") || !strings.Contains(all, "listed@test") {
				t.Errorf("the caller's agent changed:\n%s", all)
			}
			mu.Lock()
			defer mu.Unlock()
			got := map[string]int{}
			for _, u := range uses {
				got[u.Op+map[bool]string{true: " allowed", false: " refused"}[u.Allowed]]++
			}
			if got["sign allowed"] != 1 || got["sign refused"] != 1 || got["add refused"] != 1 || got["remove refused"] < 2 {
				t.Errorf("uses reported: %v (%+v)", got, uses)
			}
		})
	}
}

// TestNewRefusesMissingKey: a key the caller's agent does not hold stops the run before it starts.
func TestNewRefusesMissingKey(t *testing.T) {
	need(t, "ssh-agent", "ssh-add", "ssh-keygen")
	sock, _ := hostAgent(t)
	_, err := New(Config{Upstream: func() (net.Conn, error) { return net.Dial("unix", sock) }, Keys: []string{"SHA256:nosuchkey"}})
	if err == nil || !strings.Contains(err.Error(), "SHA256:nosuchkey") {
		t.Fatalf("error %v, want one naming the missing key", err)
	}
}

// TestCommentNamesOneKey: a comment two of the caller's keys share is refused (the control: the
// same agent with one of them, and a fingerprint of either, are accepted), and a key the caller's
// agent gains after the filter was made with a listed comment is neither listed to nor signed for
// the sandbox.
func TestCommentNamesOneKey(t *testing.T) {
	keyring := agent.NewKeyring()
	add := func(comment string) ssh.PublicKey {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if err := keyring.Add(agent.AddedKey{PrivateKey: priv, Comment: comment}); err != nil {
			t.Fatal(err)
		}
		signer, _ := ssh.NewSignerFromKey(priv)
		return signer.PublicKey()
	}
	upstream := func() (net.Conn, error) {
		a, b := net.Pipe()
		go func() { _ = agent.ServeAgent(keyring, b); b.Close() }()
		return a, nil
	}
	first := add("me@laptop")
	filter, err := New(Config{Upstream: upstream, Keys: []string{"me@laptop"}})
	if err != nil {
		t.Fatalf("one key with the comment: %v", err)
	}
	later := add("me@laptop")
	up := keyring.(agent.ExtendedAgent)
	if keys, err := filter.allowed(up); err != nil || len(keys) != 1 || string(keys[0].Marshal()) != string(first.Marshal()) {
		t.Errorf("listed %v %v, want the first key alone", keys, err)
	}
	req := binary.BigEndian.AppendUint32(appendString(appendString([]byte{msgSignRequest}, later.Marshal()), []byte("data")), 0)
	if out := filter.answer(req, up); out[0] != msgFailure {
		t.Errorf("signed with a key added later under the listed comment")
	}
	if _, err := New(Config{Upstream: upstream, Keys: []string{"me@laptop"}}); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Errorf("a comment two keys share: %v, want refused", err)
	}
	if _, err := New(Config{Upstream: upstream, Keys: []string{ssh.FingerprintSHA256(later)}}); err != nil {
		t.Errorf("by fingerprint: %v", err)
	}
}

// FuzzAnswer: whatever bytes a request holds, the filter answers without panicking, and a
// signature comes back only for the listed key.
func FuzzAnswer(f *testing.F) {
	keyring := agent.NewKeyring()
	var listed, other ssh.PublicKey
	for i, comment := range []string{"listed@test", "other@test"} {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			f.Fatal(err)
		}
		if err := keyring.Add(agent.AddedKey{PrivateKey: priv, Comment: comment}); err != nil {
			f.Fatal(err)
		}
		signer, _ := ssh.NewSignerFromKey(priv)
		if i == 0 {
			listed = signer.PublicKey()
		} else {
			other = signer.PublicKey()
		}
	}
	filter := &Filter{cfg: Config{Keys: []string{"listed@test"}}, keys: map[string]bool{string(listed.Marshal()): true}}
	up := keyring.(agent.ExtendedAgent)
	sign := func(k ssh.PublicKey) []byte {
		return binary.BigEndian.AppendUint32(appendString(appendString([]byte{msgSignRequest}, k.Marshal()), []byte("data")), 0)
	}
	f.Add([]byte{msgListRequest})
	f.Add(sign(listed))
	f.Add(sign(other))
	f.Add([]byte{msgAddIdentity, 0, 0, 0, 1})
	f.Add([]byte{msgExtension, 0, 0, 0, 4, 'q', 'u', 'e', 'r'})
	f.Fuzz(func(t *testing.T, req []byte) {
		if len(req) == 0 {
			return
		}
		out := filter.answer(req, up)
		if out[0] != msgSignResponse {
			return
		}
		blob, _, ok := readString(req[1:])
		if !ok || string(blob) != string(listed.Marshal()) {
			t.Fatalf("signed for a key that is not listed: %x", req)
		}
	})
}
