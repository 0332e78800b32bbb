//go:build linux

package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/credfiles"
)

func credentialProbes() []Probe {
	return []Probe{
		{"cred.env", Credentials, "find a secret from the caller's environment in this process's environment", credEnv},
		{"cred.proc-environ", Credentials, "read another process's environment (/proc/*/environ)", credProcEnviron},
		{"cred.files", Credentials, "read well-known credential files (ssh keys, cloud, gh, docker, netrc)", credFiles},
		{"cred.agent-sockets", Credentials, "connect to ssh-agent and gpg-agent sockets", credAgentSockets},
		{"cred.keyring", Credentials, "reach the kernel keyrings (keyctl)", credKeyring},
		{"cred.placeholder", Credentials, "find a credential's real value where the agent holds its placeholder", credPlaceholder},
		{"cred.cleartext", Credentials, "send a credential's placeholder to its host over plain HTTP (straight, via the proxy, in a CONNECT tunnel)", credCleartext},
	}
}

func credEnv(_ context.Context, env *Env) Verdict {
	s := env.Canaries.Env
	if s == nil {
		return skip("no environment canary given (cordon verify sets one)")
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if Sum([]byte(v)) == s.SHA256 {
			return fail("the caller's secret is in this environment as %s", k)
		}
	}
	return pass("no variable holds the caller's secret (%s)", s.Name)
}

// environHas reports whether an environ block (NUL-separated) holds a variable whose value hashes to
// sha.
func environHas(b []byte, sha string) (string, bool) {
	for _, kv := range bytes.Split(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if ok && Sum(v) == sha {
			return string(k), true
		}
	}
	return "", false
}

func credProcEnviron(_ context.Context, env *Env) Verdict {
	// Only the host process's own secret counts: the caller's environment may legitimately reach
	// the sandbox's own processes (cred.env judges that).
	p := env.Canaries.Process
	if p == nil {
		return skip("no process canary given (cordon verify starts one)")
	}
	want := []string{p.Env.SHA256}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return pass("cannot list /proc: %v", err)
	}
	self := fmt.Sprint(os.Getpid())
	read := 0
	for _, e := range ents {
		if e.Name() == self || !isPID(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		read++
		for _, sha := range want {
			if k, ok := environHas(b, sha); ok {
				return fail("process %s's environment holds the host secret as %s", e.Name(), k)
			}
		}
	}
	return pass("read %d other processes' environments; none holds a host secret", read)
}

func isPID(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func credFiles(_ context.Context, env *Env) Verdict {
	homes := map[string]bool{}
	if h, err := os.UserHomeDir(); err == nil {
		homes[h] = true
	}
	if s := env.Canaries.SecretFile; s != nil {
		homes[filepath.Dir(s.Path)] = true
	}
	homes["/root"] = true
	var found []string
	for h := range homes {
		for _, f := range credfiles.Home() {
			p := filepath.Join(h, f.Rel)
			if b, err := os.ReadFile(p); err == nil && len(bytes.TrimSpace(b)) > 0 {
				found = append(found, p)
			}
		}
	}
	if s := env.Canaries.SecretFile; s != nil {
		if ok, _ := readSecret(s.Path, s.SHA256); ok {
			found = append(found, s.Path+" (the planted canary)")
		}
	}
	if len(found) > 0 {
		return fail("readable: %s", strings.Join(found, ", "))
	}
	return pass("none of %d well-known credential files is readable", len(credfiles.Home()))
}

// agentSockets lists the places ssh and gpg agents listen.
func agentSockets(env *Env) []string {
	var out []string
	if s := os.Getenv("SSH_AUTH_SOCK"); s != "" {
		out = append(out, s)
	}
	if env.Canaries.AgentSocket != "" {
		out = append(out, env.Canaries.AgentSocket)
	}
	home, _ := os.UserHomeDir()
	for _, g := range []string{"/tmp/ssh-*/agent.*", "/run/user/*/gnupg/S.gpg-agent*", "/run/user/*/keyring/ssh", "/run/user/*/gcr/ssh", "/run/user/*/ssh-agent.socket", filepath.Join(home, ".gnupg/S.gpg-agent*")} {
		m, _ := filepath.Glob(g)
		out = append(out, m...)
	}
	return out
}

func credAgentSockets(_ context.Context, env *Env) Verdict {
	socks := agentSockets(env)
	for _, s := range socks {
		c, err := net.DialTimeout("unix", s, attemptTimeout)
		if err == nil {
			c.Close()
			return fail("connected to the agent socket %s", s)
		}
	}
	if len(socks) == 0 {
		return pass("no agent socket is visible")
	}
	return pass("%d agent socket path(s) known, none connectable", len(socks))
}

func credKeyring(_ context.Context, _ *Env) Verdict {
	id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_USER_KEYRING, false)
	if err != nil {
		return pass("keyctl refused: %v", err)
	}
	return fail("the user keyring is reachable (id %d): keys stored there by the host user can be read", id)
}

func credPlaceholder(_ context.Context, env *Env) Verdict {
	if len(env.Canaries.Placeholders) == 0 {
		return skip("the policy injects no credentials")
	}
	held := map[string]string{}
	var names []string
	for _, p := range env.Canaries.Placeholders {
		v, ok := os.LookupEnv(p.Name)
		if !ok || v == "" {
			return fail("$%s is not set: the policy promises a placeholder there", p.Name)
		}
		sum := sha256.Sum256([]byte(v))
		held[p.Name] = hex.EncodeToString(sum[:])
		names = append(names, p.Name)
	}
	return Verdict{Status: Skip, Held: held,
		Evidence: strings.Join(names, ", ") + " set; the host decides whether they hold placeholders or the real values"}
}
