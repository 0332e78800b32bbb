//go:build linux

package linux

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// The parent (cordon) and the sandbox's init talk in typed messages, each a JSON envelope
// {"kind": …, "body": …} whose body is the Go type of its kind. They travel three ways: the launch
// message as init's argv[1], the config over the config pipe, and everything else as one datagram
// each over the status socket, which can carry descriptors beside (SCM_RIGHTS). Every message says
// how many descriptors belong to it, and one that arrives with another number, an unknown kind, a
// field its kind does not have or a body that does not hold is refused: neither side guesses.

// msgKind names a message.
type msgKind string

const (
	// kindLaunch (parent → init, argv[1]): what init sets up before its config arrives.
	kindLaunch msgKind = "launch"
	// kindConfig (parent → init, the config pipe): the spec and what the parent resolved on the host.
	kindConfig msgKind = "config"
	// kindHostSources (parent → init, status socket, as root): the detached mounts of the host paths
	// the sandbox shows, sent before the config that says so.
	kindHostSources msgKind = "host-sources"
	// kindEtcFiles (parent → init, status socket): the generated /etc files too large for the
	// config, as sealed memfds, sent after the host sources and before the config that counts them.
	kindEtcFiles msgKind = "etc-files"
	// kindSockets (init → parent): the gateway's sockets, made inside the sandbox's network namespace.
	kindSockets msgKind = "sockets"
	// kindTerminal (init → parent): the master side of the sandbox's pseudo-terminal.
	kindTerminal msgKind = "terminal"
	// kindFailed (init → parent): a step of the boundary could not be set up; nothing runs.
	kindFailed msgKind = "failed"
	// kindExecFailed (init → parent): the command could not be executed.
	kindExecFailed msgKind = "exec-failed"
	// kindStarted (init → parent): the command runs inside the finished boundary.
	kindStarted msgKind = "started"
	// kindExited (init → parent, last): the command ended and every other process of the sandbox is
	// gone (killed and reaped); init exits next. cordon can report the status at once, while the
	// kernel still tears the namespaces down.
	kindExited msgKind = "exited"
)

// message is one message between the parent and init.
type message interface {
	kind() msgKind
	// fds is how many descriptors travel with the message.
	fds() int
	// check refuses a body that its kind cannot have.
	check() error
}

// launchMsg is init's argv[1].
type launchMsg struct {
	// Egress, when set, has init create the gateway's sockets and nftables rules as soon as it
	// starts, while cordon still prepares the run.
	Egress *sandbox.EgressPorts `json:"egress,omitempty"`
	// Publish, when set, has init dial these ports on the sandbox's loopback for cordon, which
	// asks over publishFD (publish.go).
	Publish []uint16 `json:"publish,omitempty"`
}

// hostSourcesMsg carries Count descriptors, in the order openHostSources made them.
type hostSourcesMsg struct {
	Count int `json:"count"`
}

// etcFilesMsg carries Count descriptors, one per generated /etc entry whose File names it.
type etcFilesMsg struct {
	Count int `json:"count"`
}

// socketsMsg carries the gateway's sockets, one descriptor per role, in order.
type socketsMsg struct {
	Roles []socketRole `json:"roles"`
}

// terminalMsg carries the pseudo-terminal's master.
type terminalMsg struct{}

// failedMsg says which step of the boundary failed, and why.
type failedMsg struct {
	Step  string `json:"step"`
	Error string `json:"error"`
	// NoOverlay says the step failed because overlayfs cannot be mounted here (sandbox.ErrNoOverlay).
	NoOverlay bool `json:"noOverlay,omitempty"`
}

// execFailedMsg says the command could not be executed.
type execFailedMsg struct {
	Error    string `json:"error"`
	NotFound bool   `json:"notFound,omitempty"`
	// Interpreter is the script's missing interpreter (sandbox.ExecError.Interpreter).
	Interpreter string `json:"interpreter,omitempty"`
	// NoExecBit: a file without execute permission (sandbox.ExecError.NoExecBit).
	NoExecBit bool `json:"noExecBit,omitempty"`
}

// startedMsg says the command runs, with one-line notices (a defense-in-depth layer the kernel lacks).
type startedMsg struct {
	Warnings []string `json:"warnings,omitempty"`
}

// exitedMsg is init's last message: how the command ended.
type exitedMsg struct {
	Code int `json:"code"`
}

func (*launchMsg) kind() msgKind      { return kindLaunch }
func (*initConfig) kind() msgKind     { return kindConfig }
func (*hostSourcesMsg) kind() msgKind { return kindHostSources }
func (*etcFilesMsg) kind() msgKind    { return kindEtcFiles }
func (*socketsMsg) kind() msgKind     { return kindSockets }
func (*terminalMsg) kind() msgKind    { return kindTerminal }
func (*failedMsg) kind() msgKind      { return kindFailed }
func (*execFailedMsg) kind() msgKind  { return kindExecFailed }
func (*startedMsg) kind() msgKind     { return kindStarted }
func (*exitedMsg) kind() msgKind      { return kindExited }

func (*launchMsg) fds() int        { return 0 }
func (*initConfig) fds() int       { return 0 }
func (m *hostSourcesMsg) fds() int { return m.Count }
func (m *etcFilesMsg) fds() int    { return m.Count }
func (m *socketsMsg) fds() int     { return len(m.Roles) }
func (*terminalMsg) fds() int      { return 1 }
func (*failedMsg) fds() int        { return 0 }
func (*execFailedMsg) fds() int    { return 0 }
func (*startedMsg) fds() int       { return 0 }
func (*exitedMsg) fds() int        { return 0 }

func (*launchMsg) check() error   { return nil }
func (*terminalMsg) check() error { return nil }
func (*startedMsg) check() error  { return nil }

func (c *initConfig) check() error {
	if len(c.Spec.Args) == 0 {
		return errors.New("no command")
	}
	if c.EtcFiles < 0 || c.EtcFiles > maxEtcFiles {
		return fmt.Errorf("%d /etc files (0 to %d)", c.EtcFiles, maxEtcFiles)
	}
	for _, e := range c.Etc {
		if e.File < 0 || e.File > c.EtcFiles || e.File > 0 && (e.Kind != "generated" || e.Content != "" || len(e.Binary) > 0) {
			return fmt.Errorf("/etc/%s names descriptor %d of %d", e.Name, e.File, c.EtcFiles)
		}
		if e.HostPrefix != "" && (e.Kind != "generated" || e.File > 0 || !filepath.IsAbs(e.HostPrefix) || filepath.Clean(e.HostPrefix) != e.HostPrefix) {
			return fmt.Errorf("/etc/%s: host prefix %q", e.Name, e.HostPrefix)
		}
	}
	return nil
}

func (m *etcFilesMsg) check() error {
	if m.Count < 1 || m.Count > maxEtcFiles {
		return fmt.Errorf("%d /etc files (1 to %d)", m.Count, maxEtcFiles)
	}
	return nil
}

func (m *hostSourcesMsg) check() error {
	if m.Count < 1 || m.Count > maxHostSources {
		return fmt.Errorf("%d host paths (1 to %d)", m.Count, maxHostSources)
	}
	return nil
}

func (m *socketsMsg) check() error {
	if len(m.Roles) == 0 || len(m.Roles) > maxSockets {
		return fmt.Errorf("%d sockets (1 to %d)", len(m.Roles), maxSockets)
	}
	for _, r := range m.Roles {
		if !r.valid() {
			return fmt.Errorf("unknown socket role %q", r)
		}
	}
	return nil
}

func (m *failedMsg) check() error {
	if m.Step == "" || m.Error == "" {
		return errors.New("a failure without its step or error")
	}
	return nil
}

func (m *execFailedMsg) check() error {
	if m.Error == "" {
		return errors.New("an exec failure without its error")
	}
	return nil
}

func (m *exitedMsg) check() error {
	if m.Code < 0 || m.Code > 255 {
		return fmt.Errorf("exit code %d", m.Code)
	}
	return nil
}

// envelope is a message on the wire.
type envelope struct {
	Kind msgKind         `json:"kind"`
	Body json.RawMessage `json:"body"`
}

// encodeMsg is a message's wire form.
func encodeMsg(m message) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s message: %w", m.kind(), err)
	}
	return json.Marshal(envelope{Kind: m.kind(), Body: body})
}

// decodeMsg reads a message's wire form, refusing an unknown kind, a field its kind does not have
// and a body that does not hold.
func decodeMsg(b []byte) (message, error) {
	var env envelope
	if err := strictJSON(b, &env); err != nil {
		return nil, fmt.Errorf("malformed message: %w", err)
	}
	var m message
	switch env.Kind {
	case kindLaunch:
		m = &launchMsg{}
	case kindConfig:
		m = &initConfig{}
	case kindHostSources:
		m = &hostSourcesMsg{}
	case kindEtcFiles:
		m = &etcFilesMsg{}
	case kindSockets:
		m = &socketsMsg{}
	case kindTerminal:
		m = &terminalMsg{}
	case kindFailed:
		m = &failedMsg{}
	case kindExecFailed:
		m = &execFailedMsg{}
	case kindStarted:
		m = &startedMsg{}
	case kindExited:
		m = &exitedMsg{}
	default:
		return nil, fmt.Errorf("malformed message: unknown kind %q", env.Kind)
	}
	if len(env.Body) == 0 {
		return nil, fmt.Errorf("malformed %s message: no body", env.Kind)
	}
	if err := strictJSON(env.Body, m); err != nil {
		return nil, fmt.Errorf("malformed %s message: %w", env.Kind, err)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("malformed %s message: %w", env.Kind, err)
	}
	return m, nil
}

// strictJSON decodes exactly one JSON value of v's type from b.
func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data")
	}
	return nil
}

// receiveDescriptors reads the next message from the status socket, which must be of kind and carry
// want descriptors (what, for the error); anything else is refused and its descriptors closed.
func receiveDescriptors(sock int, kind msgKind, want, max int, what string) ([]*os.File, error) {
	m, files, err := newReceiver(sock, max).recv()
	if err != nil {
		return nil, err
	}
	if m.kind() != kind || len(files) != want {
		closeAll(files)
		return nil, fmt.Errorf("expected %d %s, received a %s message with %d", want, what, m.kind(), len(files))
	}
	return files, nil
}

// endpoint is one end of the status socket, used by its descriptor or through the runtime's poller.
// Init blocks on its descriptor: its one locked thread has nothing else to do. Cordon's end is in the
// poller (pollEndpoint), so that a goroutine waiting for init's messages (the whole of init's start,
// then the command's run) parks and hands its processor back. Held in a blocking recvmsg, the
// processor was in a system call, and while no other was idle Go's monitor thread took it back every
// 20 µs, each a wake-up and a context switch, for the whole wait.
type endpoint struct {
	fd int
	rc syscall.RawConn // when set, fd is not used
}

// pollEndpoint is f's endpoint in the poller; f must have been made non-blocking before os.NewFile
// (so that it is in the poller), and f.Fd must never be called: it makes f blocking again.
func pollEndpoint(f *os.File) (endpoint, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return endpoint{}, err
	}
	return endpoint{rc: rc}, nil
}

// recvmsg reads one datagram, waiting for it; descriptors received are close-on-exec.
func (e endpoint) recvmsg(p, oob []byte) (n, oobn, flags int, err error) {
	if e.rc == nil {
		for {
			n, oobn, flags, _, err = unix.Recvmsg(e.fd, p, oob, unix.MSG_CMSG_CLOEXEC)
			if err != unix.EINTR {
				return n, oobn, flags, err
			}
		}
	}
	perr := e.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, flags, _, err = unix.Recvmsg(int(fd), p, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if perr != nil {
		return 0, 0, 0, perr
	}
	return n, oobn, flags, err
}

// sendmsg sends one datagram, waiting for room.
func (e endpoint) sendmsg(p, oob []byte) error {
	var err error
	if e.rc == nil {
		for {
			if err = unix.Sendmsg(e.fd, p, oob, nil, 0); err != unix.EINTR {
				return err
			}
		}
	}
	perr := e.rc.Write(func(fd uintptr) bool {
		for {
			if err = unix.Sendmsg(int(fd), p, oob, nil, unix.MSG_DONTWAIT); err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if perr != nil {
		return perr
	}
	return err
}

// sendMsg sends m as one datagram on the status socket sock, with its descriptors.
func sendMsg(sock int, m message, files ...*os.File) error {
	return sendMsgOn(endpoint{fd: sock}, m, files...)
}

// sendMsgOn sends m as one datagram on the status socket's end e, with its descriptors.
func sendMsgOn(e endpoint, m message, files ...*os.File) error {
	if len(files) != m.fds() {
		return fmt.Errorf("a %s message with %d descriptors, not %d", m.kind(), len(files), m.fds())
	}
	b, err := encodeMsg(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if err := e.sendmsg(b, oob); err != nil {
		return fmt.Errorf("sending the %s message: %w", m.kind(), err)
	}
	return nil
}

// receiver reads messages from the status socket, with buffers for the largest it takes.
type receiver struct {
	end      endpoint
	buf, oob []byte
}

// newReceiver reads from sock messages that carry at most maxFDs descriptors.
func newReceiver(sock, maxFDs int) *receiver { return newReceiverOn(endpoint{fd: sock}, maxFDs) }

// newReceiverOn reads from the end e messages that carry at most maxFDs descriptors.
func newReceiverOn(e endpoint, maxFDs int) *receiver {
	return &receiver{end: e, buf: make([]byte, 64<<10), oob: make([]byte, unix.CmsgSpace(4*maxFDs))}
}

// malformedError is a message recv refused, as against the channel failing: the reader may go on
// to the next one.
type malformedError struct{ err error }

func (e *malformedError) Error() string { return e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

// errChannelClosed says the other end closed the status socket (or ended) without another message.
var errChannelClosed = errors.New("the status channel closed")

// recv reads one message and the descriptors that came with it, which the caller then owns. A
// message that does not decode, or whose descriptors are not the number it says, is refused and
// its descriptors closed.
func (r *receiver) recv() (message, []*os.File, error) {
	n, oobn, flags, err := r.end.recvmsg(r.buf, r.oob)
	if err != nil {
		return nil, nil, err
	}
	var files []*os.File
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(r.oob[:oobn])
		if err != nil {
			return nil, nil, &malformedError{fmt.Errorf("malformed control message: %w", err)}
		}
		for _, c := range cmsgs {
			fds, err := unix.ParseUnixRights(&c)
			if err != nil {
				closeAll(files)
				return nil, nil, &malformedError{fmt.Errorf("malformed control message: %w", err)}
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "received"))
			}
		}
	}
	if n == 0 && len(files) == 0 {
		return nil, nil, errChannelClosed
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(files)
		return nil, nil, &malformedError{errors.New("malformed message: truncated")}
	}
	m, err := decodeMsg(r.buf[:n])
	if err == nil && len(files) != m.fds() {
		err = fmt.Errorf("malformed %s message: %d descriptors, not %d", m.kind(), len(files), m.fds())
	}
	if err != nil {
		closeAll(files)
		return nil, nil, &malformedError{err}
	}
	return m, files, nil
}
