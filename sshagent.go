package cordon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sshagent"
)

// agentDir is where the sandbox finds its ssh-agent socket (agentSocketName in it).
const (
	agentDir        = "/run/cordon/ssh-agent"
	agentSocketName = "agent.sock"
)

// agentSocket is a run's ssh-agent socket: a directory of its own outside cordon's state (0700, so
// no other user of the host reaches the caller's keys through it), mounted into the sandbox, and the
// filter serving it.
type agentSocket struct {
	dir  string
	ln   net.Listener
	done chan error
}

// startAgent makes the sandbox's agent socket for the policy's sshAgent credential, if it has one:
// it relays to the caller's SSH_AUTH_SOCK only list and sign for the listed keys, each use an audit
// event of the gateway's log, and spec gets the mount and the variable. A policy with an sshAgent
// credential but no network section, a caller without an agent, or a listed key the agent lacks
// stops the run.
func (b *builder) startAgent(pol *policy.Policy, gw *gateway.Gateway, spec *sandbox.Spec) (*agentSocket, error) {
	var cred *policy.Credential
	for i := range pol.Credentials {
		if pol.Credentials[i].From.SSHAgent != nil {
			if cred != nil {
				return nil, fmt.Errorf("credential %s: one sshAgent credential per run (%s is one already)", pol.Credentials[i].Name, cred.Name)
			}
			cred = &pol.Credentials[i]
		}
	}
	if cred == nil {
		return nil, nil
	}
	if gw == nil {
		return nil, fmt.Errorf("credential %s: sshAgent needs a network section (ssh reaches its hosts through the gateway)", cred.Name)
	}
	upstream := getenv(b.env, "SSH_AUTH_SOCK")
	if upstream == "" {
		return nil, fmt.Errorf("credential %s: sshAgent needs a running ssh-agent (SSH_AUTH_SOCK is not set)", cred.Name)
	}
	filter, err := sshagent.New(sshagent.Config{
		Upstream: func() (net.Conn, error) { return net.Dial("unix", upstream) },
		Keys:     cred.From.SSHAgent.Keys,
		OnUse: func(u sshagent.Use) {
			ev := audit.Event{Time: time.Now(), Kind: audit.KindSSHAgent, Name: u.Comment, Decision: audit.Deny,
				Rule: "credentials." + cred.Name, Detail: map[string]string{"op": u.Op}}
			if u.Fingerprint != "" {
				ev.Detail["key"] = u.Fingerprint
			}
			if u.Allowed {
				ev.Decision = audit.Allow
			} else {
				ev.Reason = "only list and sign, for the keys the policy lists"
			}
			gw.Record(ev)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("credential %s: %w", cred.Name, err)
	}
	dir, err := os.MkdirTemp("", "cordon-ssh-agent-")
	if err != nil {
		return nil, fmt.Errorf("credential %s: %w", cred.Name, err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, agentSocketName))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("credential %s: %w", cred.Name, err)
	}
	a := &agentSocket{dir: dir, ln: ln, done: make(chan error, 1)}
	go func() { a.done <- filter.Serve(ln) }()
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: dir, Target: agentDir})
	inside := cred.Name + "=" + filepath.Join(agentDir, agentSocketName)
	replaced := false
	for i, kv := range spec.Env {
		if strings.HasPrefix(kv, cred.Name+"=") {
			spec.Env[i], replaced = inside, true
		}
	}
	if replaced {
		b.warn.notice(fmt.Sprintf("credential %s: the variable names the sandbox's filtered ssh-agent, not the one env set", cred.Name))
	} else {
		spec.Env = append(spec.Env, inside)
	}
	return a, nil
}

// knownHosts is /etc/ssh/ssh_known_hosts for the sandbox: the caller's and the system's lines for the
// names and ports network.allow lists, nil when none.
func (b *builder) knownHosts(n *policy.Network) []byte {
	if n == nil {
		return nil
	}
	var hosts []sshagent.Host
	for _, e := range n.Allow {
		if strings.HasPrefix(e.Host, "*") {
			continue
		}
		ports := e.Ports
		if len(ports) == 0 {
			ports = []uint16{443}
		}
		for _, p := range ports {
			hosts = append(hosts, sshagent.Host{Name: e.Host, Port: p})
		}
	}
	if len(hosts) == 0 {
		return nil
	}
	return sshagent.KnownHosts([]string{filepath.Join(b.home, ".ssh", "known_hosts"), "/etc/ssh/ssh_known_hosts"}, hosts)
}

// Close stops serving (the sandbox's clients see their connections end) and removes the socket.
func (a *agentSocket) Close() error {
	if a == nil {
		return nil
	}
	err := a.ln.Close()
	if serr := <-a.done; serr != nil && !errors.Is(serr, net.ErrClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, os.RemoveAll(a.dir))
}
