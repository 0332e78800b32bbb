//go:build linux

package linux

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// TestMessagesRoundTrip: every kind of message decodes to what was encoded, as its own type.
func TestMessagesRoundTrip(t *testing.T) {
	for _, m := range []message{
		&launchMsg{},
		&launchMsg{Egress: &sandbox.EgressPorts{Transparent: 15001, Proxy: 3128, DNS: 53}},
		&initConfig{Spec: sandbox.Spec{Args: []string{"sh", "-c", "true"}, Env: []string{"A=b"}, Workspace: sandbox.Workspace{Path: "/w", Source: "/w",
			Overlay: &sandbox.Overlay{Upper: "/r/upper", Work: "/r/work"}}, Limits: sandbox.Limits{Pids: 5}},
			User: testUser, TTY: true, TTYRows: 24, TTYCols: 80, Etc: []etcEntry{{Name: "hosts", Kind: "generated", Content: "x"}},
			LandlockABI: 6, HostSources: true},
		&hostSourcesMsg{Count: 3},
		&etcFilesMsg{Count: 2},
		&initConfig{Spec: sandbox.Spec{Args: []string{"true"}}, Etc: []etcEntry{{Name: "cordon/java-cacerts.jks", Kind: "generated", File: 1}, {Name: "cordon/ca-bundle.crt", Kind: "generated", Content: "CA", HostPrefix: "/etc/ssl/certs/ca-certificates.crt"}}, EtcFiles: 1},
		&socketsMsg{Roles: []socketRole{roleTransparent, roleProxy, roleDNSTCP, roleDNSUDP}},
		&terminalMsg{},
		&failedMsg{Step: stepOverlay, Error: "create overlay: invalid argument", NoOverlay: true},
		&execFailedMsg{Error: "executable file not found", NotFound: true},
		&execFailedMsg{Error: "its interpreter python9: executable file not found", NotFound: true, Interpreter: "python9"},
		&execFailedMsg{Error: "permission denied", NoExecBit: true},
		&startedMsg{Warnings: []string{"no Landlock"}},
		&exitedMsg{Code: 137},
	} {
		b, err := encodeMsg(m)
		if err != nil {
			t.Fatalf("%s: %v", m.kind(), err)
		}
		got, err := decodeMsg(b)
		if err != nil {
			t.Fatalf("%s: decoding %s: %v", m.kind(), b, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: round trip gave %#v, want %#v", m.kind(), got, m)
		}
	}
}

// TestMalformedMessagesRefused: what is not exactly a message of a known kind is refused, never
// guessed at.
func TestMalformedMessagesRefused(t *testing.T) {
	for _, tc := range []struct{ name, wire, want string }{
		{"not JSON", `{"kind":`, "malformed message"},
		{"no kind", `{"body":{}}`, "unknown kind"},
		{"unknown kind", `{"kind":"shell","body":{}}`, "unknown kind"},
		{"unknown envelope field", `{"kind":"started","body":{},"extra":1}`, "unknown field"},
		{"no body", `{"kind":"started"}`, "no body"},
		{"unknown body field", `{"kind":"exited","body":{"code":0,"signal":9}}`, "unknown field"},
		{"wrong body type", `{"kind":"exited","body":{"code":"0"}}`, "malformed exited"},
		{"trailing data", `{"kind":"started","body":{}} {"kind":"started","body":{}}`, "trailing"},
		{"exit code out of range", `{"kind":"exited","body":{"code":300}}`, "exit code"},
		{"failure without step", `{"kind":"failed","body":{"error":"x"}}`, "step"},
		{"exec failure without error", `{"kind":"exec-failed","body":{"notFound":true}}`, "error"},
		{"unknown socket role", `{"kind":"sockets","body":{"roles":["ssh"]}}`, "role"},
		{"no sockets", `{"kind":"sockets","body":{"roles":[]}}`, "0 sockets"},
		{"too many host paths", `{"kind":"host-sources","body":{"count":1000}}`, "host paths"},
		{"config without command", `{"kind":"config","body":{"spec":{}}}`, "no command"},
		{"no /etc files", `{"kind":"etc-files","body":{"count":0}}`, "/etc files"},
		{"an /etc file beyond those sent", `{"kind":"config","body":{"spec":{"args":["true"]},"etc":[{"name":"x","kind":"generated","file":2}],"etcFiles":1}}`, "names descriptor 2 of 1"},
		{"an /etc file both inline and sent", `{"kind":"config","body":{"spec":{"args":["true"]},"etc":[{"name":"x","kind":"generated","content":"a","file":1}],"etcFiles":1}}`, "names descriptor 1 of 1"},
		{"a bound /etc entry named a descriptor", `{"kind":"config","body":{"spec":{"args":["true"]},"etc":[{"name":"hosts","kind":"file","file":1}],"etcFiles":1}}`, "names descriptor"},
		{"a host prefix on a bound /etc entry", `{"kind":"config","body":{"spec":{"args":["true"]},"etc":[{"name":"hosts","kind":"file","hostPrefix":"/etc/shadow"}]}}`, "host prefix"},
		{"a relative host prefix", `{"kind":"config","body":{"spec":{"args":["true"]},"etc":[{"name":"x","kind":"generated","hostPrefix":"etc/ssl/cert.pem"}]}}`, "host prefix"},
		{"a host prefix that climbs", `{"kind":"config","body":{"spec":{"args":["true"]},"etc":[{"name":"x","kind":"generated","hostPrefix":"/etc/../root/x"}]}}`, "host prefix"},
		{"a host prefix and a descriptor", `{"kind":"config","body":{"spec":{"args":["true"]},"etc":[{"name":"x","kind":"generated","file":1,"hostPrefix":"/etc/ssl/cert.pem"}],"etcFiles":1}}`, "host prefix"},
	} {
		_, err := decodeMsg([]byte(tc.wire))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: decodeMsg(%s) = %v, want an error about %q", tc.name, tc.wire, err, tc.want)
		}
	}
}

// TestMessagesOverSocket: over a real status socket, descriptors travel with the message that
// names them, and a message whose descriptors are not the number it says is refused as malformed
// (which awaitExit reads past), its descriptors closed rather than kept; the same whether the
// receiving end blocks on its descriptor (init's) or waits in the runtime's poller (cordon's).
func TestMessagesOverSocket(t *testing.T) {
	for _, polled := range []bool{false, true} {
		t.Run(map[bool]string{false: "blocking", true: "poller"}[polled], func(t *testing.T) {
			testMessagesOverSocket(t, polled)
		})
	}
}

func testMessagesOverSocket(t *testing.T, polled bool) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if polled {
		if err := unix.SetNonblock(fds[1], true); err != nil {
			t.Fatal(err)
		}
	}
	a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	defer a.Close()
	defer b.Close()
	var r *receiver
	if polled {
		e, err := pollEndpoint(b)
		if err != nil {
			t.Fatal(err)
		}
		r = newReceiverOn(e, maxSockets)
	} else {
		r = newReceiver(int(b.Fd()), maxSockets)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()

	if err := sendMsg(int(a.Fd()), &terminalMsg{}, devnull); err != nil {
		t.Fatal(err)
	}
	m, files, err := r.recv()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*terminalMsg); !ok || len(files) != 1 {
		t.Fatalf("got %T with %d descriptors, want the terminal with one", m, len(files))
	}
	var st1, st2 unix.Stat_t
	if unix.Fstat(int(files[0].Fd()), &st1) != nil || unix.Fstat(int(devnull.Fd()), &st2) != nil || st1.Ino != st2.Ino || st1.Rdev != st2.Rdev {
		t.Error("the descriptor received is not the one sent")
	}
	closeAll(files)

	if err := sendMsg(int(a.Fd()), &startedMsg{}, devnull); err == nil {
		t.Error("sendMsg sent a started message with a descriptor")
	}
	// Forged on the wire: a terminal message without its descriptor, and a started message with one.
	forge := func(m message, files ...*os.File) {
		t.Helper()
		wire, err := encodeMsg(m)
		if err != nil {
			t.Fatal(err)
		}
		var oob []byte
		for _, f := range files {
			oob = append(oob, unix.UnixRights(int(f.Fd()))...)
		}
		if err := unix.Sendmsg(int(a.Fd()), wire, oob, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	var malformed *malformedError
	forge(&terminalMsg{})
	if m, files, err := r.recv(); !errors.As(err, &malformed) || !strings.Contains(err.Error(), "descriptors") {
		t.Errorf("a terminal message without its descriptor: got %T, %d files, %v", m, len(files), err)
	}
	// A file of this test's own, so that what the count sees is the refused message's descriptor
	// and no other goroutine's (a count of all the process's descriptors failed in CI when one
	// closed meanwhile).
	marker, err := os.CreateTemp(t.TempDir(), "marker")
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Close()
	before := descriptorsOf(t, marker)
	forge(&startedMsg{}, marker)
	if m, files, err := r.recv(); !errors.As(err, &malformed) || !strings.Contains(err.Error(), "descriptors") {
		t.Errorf("a started message with a descriptor: got %T, %d files, %v", m, len(files), err)
	}
	if after := descriptorsOf(t, marker); after != before {
		t.Errorf("the refused message's descriptor was kept: %d open to the file before, %d after", before, after)
	}
	a.Close()
	if _, _, err := r.recv(); err != errChannelClosed {
		t.Errorf("after the peer closed: %v, want errChannelClosed", err)
	}
}

// TestPolledEndpoint: cordon's end of the status socket sends to init's blocking end, waits for a
// message that comes later without holding a thread, and a wait on it ends, not as a malformed
// message, when the end is closed under it.
func TestPolledEndpoint(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	cordonEnd, initEnd := os.NewFile(uintptr(fds[0]), "cordon"), os.NewFile(uintptr(fds[1]), "init")
	defer initEnd.Close()
	e, err := pollEndpoint(cordonEnd)
	if err != nil {
		t.Fatal(err)
	}
	if err := sendMsgOn(e, &etcFilesMsg{Count: 1}, initEnd); err != nil {
		t.Fatal(err)
	}
	files, err := receiveDescriptors(int(initEnd.Fd()), kindEtcFiles, 1, maxEtcFiles, "files")
	if err != nil {
		t.Fatal(err)
	}
	closeAll(files)

	type result struct {
		m   message
		err error
	}
	got := make(chan result, 1)
	r := newReceiverOn(e, 1)
	go func() {
		m, files, err := r.recv()
		closeAll(files)
		got <- result{m, err}
	}()
	time.Sleep(10 * time.Millisecond) // the receiver is waiting before the message is sent
	if err := sendMsg(int(initEnd.Fd()), &exitedMsg{Code: 3}); err != nil {
		t.Fatal(err)
	}
	if res := <-got; res.err != nil || res.m.(*exitedMsg).Code != 3 {
		t.Fatalf("got %#v, %v; want the exited message", res.m, res.err)
	}

	go func() {
		m, files, err := r.recv()
		closeAll(files)
		got <- result{m, err}
	}()
	time.Sleep(10 * time.Millisecond)
	cordonEnd.Close()
	select {
	case res := <-got:
		var malformed *malformedError
		if res.err == nil || errors.As(res.err, &malformed) {
			t.Fatalf("a receive on a closed end: %#v, %v; want a channel error", res.m, res.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a receive went on waiting on an end that was closed")
	}
}

// openFDs counts this process's open descriptors.
// descriptorsOf counts the process's descriptors open to f's file (its device and inode; a socket's
// are its own), whatever other goroutines open and close meanwhile.
func descriptorsOf(t *testing.T, f *os.File) int {
	t.Helper()
	var want unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &want); err != nil {
		t.Fatal(err)
	}
	return descriptorsTo(t, want)
}

func descriptorsTo(t *testing.T, want unix.Stat_t) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		var st unix.Stat_t
		// The entry's link leads to the open file itself; one closed since the listing is gone.
		if unix.Stat("/proc/self/fd/"+e.Name(), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			n++
		}
	}
	return n
}

// TestListenersFromFilesRefusesIncomplete: a set of sockets the gateway could not serve (no DNS) is
// refused, and the sockets it had are closed.
func TestListenersFromFilesRefusesIncomplete(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	var sock unix.Stat_t
	if err := unix.Fstat(fd, &sock); err != nil {
		t.Fatal(err)
	}
	if n := descriptorsTo(t, sock); n != 1 {
		t.Fatalf("%d descriptors open to the socket before the refusal, want 1", n)
	}
	if _, err := listenersFromFiles([]*os.File{os.NewFile(uintptr(fd), "transparent")}, []socketRole{roleTransparent}); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("a transparent socket alone: %v, want incomplete", err)
	}
	if n := descriptorsTo(t, sock); n != 0 {
		t.Errorf("%d descriptors open to the socket after the refusal, want 0 (it is closed)", n)
	}
}
