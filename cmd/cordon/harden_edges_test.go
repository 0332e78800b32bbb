//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/syncbuf"
)

// Issue 11, items 12 (socket families) and 14 (the caller's streams), attacked from inside real
// sandboxes, root and rootless.

// socketScript creates (and closes) one socket per family or netlink protocol and prints what each
// call returned, "ok" or the errno's name, as JSON.
const socketScript = `python3 -c '
import socket, errno, json
tries = {
    "vsock stream": (40, socket.SOCK_STREAM, 0), "vsock seqpacket": (40, socket.SOCK_SEQPACKET, 0),
    "packet": (17, socket.SOCK_DGRAM, 0), "packet raw": (17, socket.SOCK_RAW, 0x0300),
    "alg": (38, socket.SOCK_SEQPACKET, 0), "key": (15, socket.SOCK_RAW, 2), "xdp": (44, socket.SOCK_RAW, 0),
    "bluetooth": (31, socket.SOCK_RAW, 1), "can": (29, socket.SOCK_RAW, 1), "tipc": (30, socket.SOCK_RDM, 0),
    "rds": (21, socket.SOCK_SEQPACKET, 0), "llc": (26, socket.SOCK_DGRAM, 0),
    "netlink netfilter": (16, socket.SOCK_RAW, 12), "netlink generic": (16, socket.SOCK_RAW, 16),
    "netlink audit": (16, socket.SOCK_RAW, 9), "netlink uevent": (16, socket.SOCK_DGRAM, 15),
    "unix": (1, socket.SOCK_STREAM, 0), "inet": (2, socket.SOCK_STREAM, 0), "inet6": (10, socket.SOCK_DGRAM, 0),
    "netlink route": (16, socket.SOCK_RAW, 0), "netlink sock_diag": (16, socket.SOCK_RAW, 4),
}
out = {}
for name, (fam, typ, proto) in tries.items():
    try:
        socket.socket(fam, typ, proto).close()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
print("SOCKETS " + json.dumps(out))
'`

// socketResults runs socketScript through run and parses its answer.
func socketResults(t *testing.T, r result) map[string]string {
	t.Helper()
	for _, line := range strings.Split(r.stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "SOCKETS "); ok {
			var m map[string]string
			if err := json.Unmarshal([]byte(rest), &m); err != nil {
				t.Fatalf("%v: %s", err, rest)
			}
			return m
		}
	}
	t.Fatalf("no answer from the socket script:\n%s", r)
	return nil
}

// TestEdgesSocketFamilies: inside, every family but unix, IPv4, IPv6 and netlink fails (vsock, which
// is not network-namespaced and on a VM reaches the hypervisor around the gateway, first of all), and
// netlink is route and sock_diag only; those keep working, and `ip` and `ss` work over them. Outside
// the sandbox, the same script opens vsock (where the host has it) and generic netlink: the control.
// In the gVisor tier runsc installs the filter and answers every refusal with EPERM (it ignores the
// OCI spec's errno), and gVisor itself has no sock_diag (EPROTONOSUPPORT, so no `ss`): the refusals
// are the filter's, not gVisor's: without the filter gVisor opens netlink uevent and answers the
// rest with its own EAFNOSUPPORT or EPROTONOSUPPORT.
func TestEdgesSocketFamilies(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		gvisor := h.tier == "gvisor"
		plain := socketResults(t, h.plain(socketScript))
		extra := ` && ip -o addr show lo && ss -lnt`
		if gvisor {
			extra = ` && ip -o addr show lo`
		}
		r := h.sandboxed("", socketScript+extra)
		if r.code != 0 {
			t.Fatalf("the allowed sockets, ip or ss failed inside:\n%s", r)
		}
		got := socketResults(t, r)
		t.Logf("inside: %v\noutside: %v", got, plain)
		allowed := []string{"unix", "inet", "inet6", "netlink route", "netlink sock_diag"}
		if gvisor {
			// gVisor's kernel implements no NETLINK_SOCK_DIAG (ss falls back to /proc/net, below):
			// the tier refuses more than the filter asks, which SECURITY-MODEL states.
			allowed = allowed[:4]
			if got["netlink sock_diag"] != "EPROTONOSUPPORT" {
				t.Errorf("netlink sock_diag: %s inside gVisor, which has none (want EPROTONOSUPPORT)", got["netlink sock_diag"])
			}
		}
		for _, name := range allowed {
			if got[name] != "ok" {
				t.Errorf("%s: %s inside, want ok", name, got[name])
			}
		}
		if !strings.Contains(r.stdout, "127.0.0.1") {
			t.Errorf("ip addr over NETLINK_ROUTE shows no loopback address:\n%s", r.stdout)
		}
		wantFamily, wantProto := "EAFNOSUPPORT", "EPROTONOSUPPORT"
		if gvisor {
			wantFamily, wantProto = "EPERM", "EPERM"
		}
		refusedFamily := []string{"vsock stream", "vsock seqpacket", "packet", "packet raw", "alg", "key", "xdp", "bluetooth", "can", "tipc", "rds", "llc"}
		for _, name := range refusedFamily {
			if got[name] != wantFamily {
				t.Errorf("%s: %s inside, want %s", name, got[name], wantFamily)
			}
		}
		for _, name := range []string{"netlink netfilter", "netlink generic", "netlink audit", "netlink uevent"} {
			if got[name] != wantProto {
				t.Errorf("%s: %s inside, want %s", name, got[name], wantProto)
			}
		}
		// The control: what the sandbox refuses, this host gives an ordinary process.
		if plain["netlink generic"] != "ok" {
			t.Errorf("outside, generic netlink gave %s: the control does not show the attack is real", plain["netlink generic"])
		}
		if plain["vsock stream"] != "ok" {
			t.Logf("this host has no vsock (%s outside): only the filter's answer inside is shown", plain["vsock stream"])
		}
	})
}

// openLog creates a host log file with earlier content, owned by uid:gid with the given mode, and
// opens it for appending as a shell's `>>log` would.
func openLog(t *testing.T, path string, uid, gid int, mode os.FileMode) *os.File {
	t.Helper()
	if err := os.WriteFile(path, []byte("EARLIER LOG CONTENT\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// streamAttack attacks the log on fd 1 (and 2) through the descriptor: chmod, truncate, append off,
// seek to the start and write; each result goes to stderr, the marker and then the exit status 3.
const streamAttack = `python3 -c '
import os, fcntl, errno, sys
def attempt(name, f):
    try:
        f(); r = "ok"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    os.write(2, ("ATTEMPT %s %s\n" % (name, r)).encode())
attempt("fchmod", lambda: os.fchmod(1, 0o777))
attempt("fchown", lambda: os.fchown(1, os.getuid(), -1))
attempt("ftruncate", lambda: os.ftruncate(1, 0))
attempt("append-off", lambda: fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) & ~os.O_APPEND))
attempt("lseek", lambda: os.lseek(1, 0, 0))
os.write(1, b"OVERWRITE")
os.write(1, b"\nAGENT OUTPUT\n")
sys.exit(3)
'`

// runToFile runs cordon with stdout and stderr on f, and stdin on in (nil: /dev/null), bounded so that
// a relay that never ends fails the test instead of hanging it.
func runToFile(t *testing.T, h *harness, f, in *os.File, args ...string) (code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = h.tierArgs(args)
	as := h.command(nil, cordonBin, args...)
	cmd := exec.CommandContext(ctx, cordonBin, args...)
	cmd.Dir, cmd.Env, cmd.SysProcAttr = as.Dir, as.Env, as.SysProcAttr
	cmd.Stdout, cmd.Stderr = f, f
	if in != nil {
		cmd.Stdin = in
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("cordon %v did not end within its bound: a relay kept it waiting", args)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// TestEdgesLogFileOnStdout: cordon's stdout and stderr are a log file on the host (`>>log 2>&1`). Inside,
// the command attacks it through fd 1; afterwards the host file keeps its mode, owner and earlier
// content, and has the command's output appended, and cordon exits with the command's status. The
// same attack run without the sandbox changes the mode and truncates the log: the control.
func TestEdgesLogFileOnStdout(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		logs := map[string]struct{ uid, gid int }{"caller's": {h.who.uid, h.who.gid}}
		if h.who.uid != 0 {
			logs["root's, world-writable"] = struct{ uid, gid int }{0, 0}
		}
		for name, owner := range logs {
			t.Run(name, func(t *testing.T) {
				mode := os.FileMode(0o644)
				if owner.uid != h.who.uid {
					mode = 0o666
				}
				// The control first: the same attack on a log handed to an unsandboxed process.
				ctl := filepath.Join(h.base, "control.log")
				cf := openLog(t, ctl, owner.uid, owner.gid, mode)
				cmd := h.command(nil, "sh", "-c", streamAttack)
				cmd.Stdout, cmd.Stderr = cf, cf
				_ = cmd.Run()
				cst, _ := os.Stat(ctl)
				cb, _ := os.ReadFile(ctl)
				if cst.Mode().Perm() == mode && strings.HasPrefix(string(cb), "EARLIER LOG CONTENT\n") {
					t.Fatalf("without the sandbox the attack changed nothing (mode %v):\n%s", cst.Mode().Perm(), cb)
				}

				path := filepath.Join(h.base, "agent.log")
				f := openLog(t, path, owner.uid, owner.gid, mode)
				code := runToFile(t, h, f, nil, "run", "--policy", h.policy(""), "--", "sh", "-c", streamAttack)
				b, _ := os.ReadFile(path)
				got := string(b)
				t.Logf("log after the run:\n%s", got)
				if code != 3 {
					t.Errorf("cordon exited %d, want the command's 3", code)
				}
				st, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm() != mode {
					t.Errorf("the host log's mode changed from %v to %v", mode, st.Mode().Perm())
				}
				if uid, gid := fileOwner(st); uid != owner.uid || gid != owner.gid {
					t.Errorf("the host log's owner changed to %d:%d", uid, gid)
				}
				if !strings.HasPrefix(got, "EARLIER LOG CONTENT\n") {
					t.Errorf("the log's earlier content was truncated or overwritten")
				}
				if !strings.HasSuffix(got, "OVERWRITE\nAGENT OUTPUT\n") {
					t.Errorf("the command's output was not appended at the end of the log")
				}
				if !strings.Contains(got, "ATTEMPT fchmod") {
					t.Errorf("the command's stderr did not reach the log")
				}
			})
		}
	})
}

// TestEdgesStreamsEndWithTheCommand: with stdout on a file, a background child that keeps it open does
// not keep cordon waiting once the command exits (init kills it), and what it would write later never
// arrives; a regular file on stdin reaches the command as a pipe, with its content, and its mode
// survives an fchmod through fd 0. (The type is read before the fchmod: gVisor's kernel lets the
// owner fchmod its end of the pipe and then reports the new mode without the file-type bits.)
func TestEdgesStreamsEndWithTheCommand(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		path := filepath.Join(h.base, "bg.log")
		f := openLog(t, path, h.who.uid, h.who.gid, 0o644)
		code := runToFile(t, h, f, nil, "run", "--policy", h.policy(""), "--", "sh", "-c", "(sleep 60; echo LATE) & echo FIRST; exit 5")
		b, _ := os.ReadFile(path)
		if code != 5 || !strings.Contains(string(b), "FIRST\n") || strings.Contains(string(b), "LATE") {
			t.Errorf("exit %d, log:\n%s", code, b)
		}

		in := filepath.Join(h.base, "input.txt")
		h.writeFile(in, "INPUT LINE "+h.canary+"\n", 0o644)
		inf, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		defer inf.Close()
		out := filepath.Join(h.base, "stdin.log")
		of := openLog(t, out, h.who.uid, h.who.gid, 0o644)
		code = runToFile(t, h, of, inf, "run", "--policy", h.policy(""), "--", "python3", "-c", `
import os, stat, sys
print("STDIN IS", "a pipe" if stat.S_ISFIFO(os.fstat(0).st_mode) else "not a pipe")
try:
    os.fchmod(0, 0o777)
except OSError:
    pass
sys.stdout.write(sys.stdin.read())
`)
		b, _ = os.ReadFile(out)
		st, _ := os.Stat(in)
		if code != 0 || !strings.Contains(string(b), "STDIN IS a pipe") || !strings.Contains(string(b), "INPUT LINE "+h.canary) {
			t.Errorf("exit %d, log:\n%s", code, b)
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("the host file on stdin changed mode to %v", st.Mode().Perm())
		}
	})
}

// TestEdgesProbes: `cordon probe` judges the socket families and the streams. On the bare host with its
// stdout on a log, fs.inherited-streams and proc.netlink fail (and net.vsock, where the host has vsock);
// inside cordon, with the same log, all pass.
func TestEdgesProbes(t *testing.T) {
	ids := "net.vsock,proc.socket-families,proc.netlink,fs.inherited-streams"
	forEachTier(t, func(t *testing.T, h *harness) {
		read := func(path string) map[string]probe.Result {
			b, _ := os.ReadFile(path)
			var sc probe.Scorecard
			if err := json.Unmarshal(b, &sc); err != nil || len(sc.Results) != 4 {
				t.Fatalf("no scorecard of 4 results (%v):\n%s", err, b)
			}
			return statuses(sc)
		}
		bare := filepath.Join(h.base, "bare.json")
		bf := openLog(t, bare, h.who.uid, h.who.gid, 0o644)
		if err := bf.Truncate(0); err != nil {
			t.Fatal(err)
		}
		cmd := h.command(nil, cordonBin, "probe", "--json", "--only", ids)
		cmd.Stdout = bf
		_ = cmd.Run()
		got := read(bare)
		for _, id := range []string{"fs.inherited-streams", "proc.netlink"} {
			if got[id].Status != probe.Fail {
				t.Errorf("%s on the bare host: %s (%s), want FAIL", id, got[id].Status, got[id].Evidence)
			}
		}
		t.Logf("bare host: net.vsock %s (%s)", got["net.vsock"].Status, got["net.vsock"].Evidence)

		inside := filepath.Join(h.base, "inside.json")
		inf := openLog(t, inside, h.who.uid, h.who.gid, 0o644)
		if err := inf.Truncate(0); err != nil {
			t.Fatal(err)
		}
		pol := h.policy("filesystem:\n  readonly: [\"" + cordonBin + "\"]\n")
		cmd = h.command(nil, cordonBin, h.tierArgs([]string{"run", "--policy", pol, "--", cordonBin, "probe", "--json", "--only", ids})...)
		cmd.Stdout = inf
		var errb strings.Builder
		cmd.Stderr = &errb
		_ = cmd.Run()
		got = read(inside)
		for _, id := range strings.Split(ids, ",") {
			if got[id].Status != probe.Pass {
				t.Errorf("%s inside cordon: %s (%s), want PASS\n%s", id, got[id].Status, got[id].Evidence, errb.String())
			}
		}
	})
}

// fileOwner returns the uid and gid that own the file st describes.
func fileOwner(st os.FileInfo) (uid, gid int) {
	sys := st.Sys().(*syscall.Stat_t)
	return int(sys.Uid), int(sys.Gid)
}

// ttyAttack reports what the command's stdout is and tries TIOCSTI, the ioctl that pushes bytes into a
// terminal's input as if typed, on it and on /dev/tty: the line it would inject is a command for the
// shell that reads the terminal after cordon exits. (The marker is split so the script itself does not
// contain it.)
const ttyAttack = `python3 -c '
import os, stat, fcntl, termios
st = os.fstat(1)
kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "chr" if stat.S_ISCHR(st.st_mode) else oct(stat.S_IFMT(st.st_mode))
print("FD1", kind, st.st_rdev, os.isatty(1), flush=True)
def sti(fd, name):
    try:
        for c in b"echo INJ" + b"ECTED\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        print("TIOCSTI", name, "ok", flush=True)
    except OSError as e:
        print("TIOCSTI", name, "refused", e.errno, flush=True)
sti(1, "fd1")
try:
    sti(os.open("/dev/tty", os.O_RDWR), "devtty")
except OSError as e:
    print("DEVTTY refused", e.errno, flush=True)
'`

// onTerminal runs cmd (built by run with the terminal's slave side as stdout and stderr, stdin not a
// terminal) on a fresh pseudo-terminal, and returns what reached the terminal's screen and how many
// bytes wait in its input, typed by no one.
func onTerminal(t *testing.T, h *harness, run func(tty *os.File)) (screen string, injected int, rdev uint64) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := tty.Chown(h.who.uid, h.who.gid); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(tty.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, ptmx); close(done) }()
	run(tty)
	injected, err = unix.IoctlGetInt(int(tty.Fd()), unix.TIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	// The master reads EIO once no slave is open: the screen is complete.
	tty.Close()
	<-done
	return out.String(), injected, st.Rdev
}

// TestEdgesTerminalOnStdoutAlone: with a terminal on stdout and stderr but not on stdin, the command
// gets a pipe cordon relays, not the terminal: it cannot push input into it (TIOCSTI) through fd 1 or
// /dev/tty, and fd 1 is not the terminal's device. The control first: the same script unsandboxed
// holds the terminal itself, and as root (CAP_SYS_ADMIN) injects a line into it.
func TestEdgesTerminalOnStdoutAlone(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		screen, injected, rdev := onTerminal(t, h, func(tty *os.File) {
			cmd := h.command(nil, "sh", "-c", ttyAttack)
			cmd.Stdout, cmd.Stderr = tty, tty
			if err := cmd.Run(); err != nil {
				t.Fatalf("the control: %v", err)
			}
		})
		if want := fmt.Sprintf("FD1 chr %d True", rdev); !strings.Contains(screen, want) {
			t.Fatalf("the control does not hold the terminal (want %q):\n%s", want, screen)
		}
		if h.who.uid == 0 && (injected == 0 || !strings.Contains(screen, "TIOCSTI fd1 ok")) {
			t.Fatalf("the control, as root, injected nothing (%d bytes waiting):\n%s", injected, screen)
		}

		screen, injected, rdev = onTerminal(t, h, func(tty *os.File) {
			if code := runToFile(t, h, tty, nil, "run", "--policy", h.policy(""), "--", "sh", "-c", ttyAttack); code != 0 {
				t.Errorf("cordon exited %d", code)
			}
		})
		t.Logf("the terminal's screen:\n%s", screen)
		if !strings.Contains(screen, "FD1 fifo 0 False") {
			t.Errorf("the command's stdout is not a pipe (the terminal is %d):\n%s", rdev, screen)
		}
		if strings.Contains(screen, fmt.Sprintf("chr %d ", rdev)) || strings.Contains(screen, "TIOCSTI fd1 ok") || strings.Contains(screen, "TIOCSTI devtty ok") {
			t.Errorf("the command reached the caller's terminal:\n%s", screen)
		}
		if !strings.Contains(screen, "TIOCSTI fd1 refused") || !strings.Contains(screen, "DEVTTY refused") && !strings.Contains(screen, "TIOCSTI devtty refused") {
			t.Errorf("the attack did not run to its end:\n%s", screen)
		}
		if injected != 0 || strings.Contains(screen, "INJECTED") {
			t.Errorf("%d bytes were injected into the caller's terminal:\n%s", injected, screen)
		}
	})
}
