// Package sshagent gives the sandbox an ssh-agent that holds no key: the sandbox's socket relays to
// the caller's agent only the requests that use a key and cannot change the agent (list and sign),
// and only for the keys the policy names, by fingerprint or comment. git and ssh inside then
// authenticate as the caller's deploy key without the private key entering the sandbox, while an
// agent inside cannot use the caller's other keys (a personal key with access to everything), add
// keys, remove them, lock the agent or call its extensions (some of which, like session binding,
// change how later signatures may be used). Each signature is reported (Config.OnSign) for the
// audit log.
package sshagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// ErrRefused answers every request the filter does not relay.
var ErrRefused = errors.New("sshagent: refused by cordon (only list and sign for the policy's keys)")

// Use is one request the sandbox made of the agent, for the audit log.
type Use struct {
	// Op is "sign", or the refused operation ("add", "remove", "lock", "unlock", "extension", and
	// "sign" of a key the policy does not list).
	Op string
	// Fingerprint and Comment name the key (empty for operations that name none).
	Fingerprint, Comment string
	// Allowed says whether it was relayed.
	Allowed bool
}

// Config is what a Filter needs.
type Config struct {
	// Upstream dials the caller's agent (its SSH_AUTH_SOCK); one connection per sandbox connection.
	Upstream func() (net.Conn, error)
	// Keys are the keys the sandbox may list and sign with: a fingerprint ("SHA256:…", as
	// ssh-add -l prints it) or a key's comment.
	Keys []string
	// OnUse, if set, is told of every signature and every refusal. It must not block.
	OnUse func(Use)
}

// Filter serves the sandbox's agent socket.
type Filter struct {
	cfg Config
	// keys are the wire forms of the caller's keys cfg.Keys named when the filter was made: a key
	// the caller's agent gains later with a listed comment is not one of them.
	keys map[string]bool
	wg   sync.WaitGroup
}

// New checks cfg and that the caller's agent holds exactly one key for every entry of cfg.Keys: a
// policy naming a key the agent lacks is a mistake to tell before the run, not a failed clone
// inside, and a comment several keys share (ssh-keygen's default, user@host, is on all of a
// caller's keys) would hand the sandbox all of them.
func New(cfg Config) (*Filter, error) {
	if cfg.Upstream == nil || len(cfg.Keys) == 0 {
		return nil, errors.New("sshagent: an upstream agent and at least one key are required")
	}
	c, err := cfg.Upstream()
	if err != nil {
		return nil, fmt.Errorf("sshagent: the caller's agent: %w", err)
	}
	defer c.Close()
	keys, err := agent.NewClient(c).List()
	if err != nil {
		return nil, fmt.Errorf("sshagent: listing the caller's keys: %w", err)
	}
	pinned := map[string]bool{}
	for _, want := range cfg.Keys {
		var found []*agent.Key
		for _, k := range keys {
			if matches(want, k) {
				found = append(found, k)
			}
		}
		switch {
		case len(found) == 0:
			return nil, fmt.Errorf("sshagent: the caller's agent holds no key %s (ssh-add -l lists its keys)", want)
		case len(found) > 1 && !strings.HasPrefix(want, "SHA256:"):
			return nil, fmt.Errorf("sshagent: %d of the caller's keys have the comment %q: name the key by its fingerprint (ssh-add -l)", len(found), want)
		}
		for _, k := range found {
			pinned[string(k.Marshal())] = true
		}
	}
	return &Filter{cfg: cfg, keys: pinned}, nil
}

// matches reports whether k is the key named by want: its SHA256 fingerprint or its comment.
func matches(want string, k *agent.Key) bool {
	if strings.HasPrefix(want, "SHA256:") {
		return ssh.FingerprintSHA256(k) == want
	}
	return k.Comment == want
}

// Serve answers the sandbox's connections on ln until it is closed, then waits for them to end.
func (f *Filter) Serve(ln net.Listener) error {
	defer f.wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("sshagent: %w", err)
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer c.Close()
			up, err := f.cfg.Upstream()
			if err != nil {
				return // the sandbox's client sees its connection close
			}
			defer up.Close()
			_ = f.serveConn(c, agent.NewClient(up))
		}()
	}
}

// The agent protocol's messages the filter knows (draft-miller-ssh-agent): two requests it relays
// and their answers; every other request gets a failure without being read further.
const (
	msgFailure          = 5
	msgListRequest      = 11
	msgListAnswer       = 12
	msgSignRequest      = 13
	msgSignResponse     = 14
	maxAgentMessage     = 256 << 10 // OpenSSH's own bound
	msgAddIdentity      = 17
	msgRemoveIdentity   = 18
	msgRemoveAll        = 19
	msgAddSmartcard     = 20
	msgRemoveSmartcard  = 21
	msgLock             = 22
	msgUnlock           = 23
	msgAddConstrained   = 25
	msgAddSmartcardCons = 26
	msgExtension        = 27
)

// refusedOps names the requests refused without reading them, for the audit log.
var refusedOps = map[byte]string{
	msgAddIdentity: "add", msgAddConstrained: "add", msgAddSmartcard: "add", msgAddSmartcardCons: "add",
	msgRemoveIdentity: "remove", msgRemoveAll: "remove", msgRemoveSmartcard: "remove",
	msgLock: "lock", msgUnlock: "unlock", msgExtension: "extension",
	// Protocol 1's, which ssh-add -D still sends.
	7: "add", 8: "remove", 9: "remove",
}

// serveConn answers one connection's requests in order until it ends or sends what is not the
// protocol.
func (f *Filter) serveConn(c io.ReadWriter, up agent.ExtendedAgent) error {
	var lenBuf [4]byte
	for {
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return nil
		}
		n := binary.BigEndian.Uint32(lenBuf[:])
		if n == 0 || n > maxAgentMessage {
			return fmt.Errorf("sshagent: a request of %d bytes", n)
		}
		req := make([]byte, n)
		if _, err := io.ReadFull(c, req); err != nil {
			return nil
		}
		answer := f.answer(req, up)
		out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(answer)), uint32(len(answer)))
		if _, err := c.Write(append(out, answer...)); err != nil {
			return nil
		}
	}
}

// answer is the reply to one request: a listing of the policy's keys, a signature by one of them,
// or a failure.
func (f *Filter) answer(req []byte, up agent.ExtendedAgent) []byte {
	failure := []byte{msgFailure}
	switch req[0] {
	case msgListRequest:
		keys, err := f.allowed(up)
		if err != nil {
			return failure
		}
		out := binary.BigEndian.AppendUint32([]byte{msgListAnswer}, uint32(len(keys)))
		for _, k := range keys {
			out = appendString(out, k.Marshal())
			out = appendString(out, []byte(k.Comment))
		}
		return out
	case msgSignRequest:
		blob, rest, ok := readString(req[1:])
		data, rest, ok2 := readString(rest)
		if !ok || !ok2 || len(rest) != 4 {
			f.use(Use{Op: "sign"})
			return failure
		}
		flags := agent.SignatureFlags(binary.BigEndian.Uint32(rest))
		sig, err := f.sign(up, blob, data, flags)
		if err != nil {
			return failure
		}
		return appendString([]byte{msgSignResponse}, ssh.Marshal(sig))
	}
	op, known := refusedOps[req[0]]
	if !known {
		op = fmt.Sprintf("request %d", req[0])
	}
	f.use(Use{Op: op})
	return failure
}

func readString(b []byte) (s, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, false
	}
	return b[4 : 4+n], b[4+n:], true
}

func appendString(b, s []byte) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

func (f *Filter) use(u Use) {
	if f.cfg.OnUse != nil {
		f.cfg.OnUse(u)
	}
}

// allowed lists the caller's keys the policy names (those New found).
func (f *Filter) allowed(up agent.ExtendedAgent) ([]*agent.Key, error) {
	keys, err := up.List()
	if err != nil {
		return nil, err
	}
	var out []*agent.Key
	for _, k := range keys {
		if f.keys[string(k.Marshal())] {
			out = append(out, k)
		}
	}
	return out, nil
}

// sign signs data with the key whose wire form is blob if the policy lists it, and tells OnUse
// either way.
func (f *Filter) sign(up agent.ExtendedAgent, blob, data []byte, flags agent.SignatureFlags) (*ssh.Signature, error) {
	keys, err := f.allowed(up)
	if err != nil {
		return nil, err
	}
	fp := ""
	if key, err := ssh.ParsePublicKey(blob); err == nil {
		fp = ssh.FingerprintSHA256(key)
	}
	for _, k := range keys {
		if string(k.Marshal()) == string(blob) {
			sig, err := up.SignWithFlags(k, data, flags)
			f.use(Use{Op: "sign", Fingerprint: fp, Comment: k.Comment, Allowed: err == nil})
			return sig, err
		}
	}
	f.use(Use{Op: "sign", Fingerprint: fp})
	return nil, ErrRefused
}
