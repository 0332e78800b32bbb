//go:build linux

package probe

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// rootProbes attack what a sandbox's root holds of the host's /etc and /dev: a secret in /etc (the
// password hashes, the ssh host keys, the machine's identity) needs no escape at all when the sandbox
// shows it, and a device node beyond the harmless few (memory, the kernel log, a disk) reads or writes
// the host around every file permission the sandbox sets up.
func rootProbes() []Probe {
	return []Probe{
		{"fs.etc-secrets", FileSystem, "read /etc/shadow, gshadow, sudoers, machine-id, the ssh host keys and ssl/private", fsEtcSecrets},
		{"fs.dev-nodes", FileSystem, "find device nodes beyond null, zero, full, random, urandom, tty and a private devpts; open host devices by path; mknod one", fsDevNodes},
	}
}

// etcSecret is one of the host's /etc secrets; a directory's Allowed entries are what a sandbox may
// put there of its own (cordon writes the policy's ssh known hosts to /etc/ssh).
type etcSecret struct {
	path    string
	dir     bool
	allowed []string
}

var etcSecrets = []etcSecret{
	{path: "/etc/shadow"}, {path: "/etc/shadow-"}, {path: "/etc/gshadow"}, {path: "/etc/gshadow-"},
	{path: "/etc/sudoers"}, {path: "/etc/sudoers.d", dir: true}, {path: "/etc/security/opasswd"},
	{path: "/etc/machine-id"},
	{path: "/etc/ssh", dir: true, allowed: []string{"ssh_known_hosts"}},
	{path: "/etc/ssl/private", dir: true},
}

// EtcSecretPaths are the /etc paths fs.etc-secrets looks for: cordon verify tells it which of them the
// host has (Canaries.EtcSecrets).
func EtcSecretPaths() []string {
	out := make([]string, len(etcSecrets))
	for i, s := range etcSecrets {
		out[i] = s.path
	}
	return out
}

// etcSeen says what this sandbox shows of one secret: nothing (""), or what is there and whether its
// content (a file's bytes, a directory's names) could be read.
func etcSeen(s etcSecret) (what string, readable bool) {
	if _, err := os.Lstat(s.path); err != nil {
		return "", false
	}
	if !s.dir {
		f, err := os.Open(s.path)
		if err != nil {
			return fmt.Sprintf("%s is there (unreadable: %s)", s.path, errName(unwrapPath(err))), false
		}
		defer f.Close()
		n, err := io.Copy(io.Discard, io.LimitReader(f, 1<<20))
		if err != nil {
			return fmt.Sprintf("%s is there (opened, read: %s)", s.path, errName(unwrapPath(err))), false
		}
		return fmt.Sprintf("read %d bytes of %s", n, s.path), true
	}
	ents, err := os.ReadDir(s.path)
	if err != nil {
		return fmt.Sprintf("%s is there (unlistable: %s)", s.path, errName(unwrapPath(err))), false
	}
	var names []string
	for _, e := range ents {
		if !slices.Contains(s.allowed, e.Name()) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "", false
	}
	return fmt.Sprintf("%s lists %s", s.path, strings.Join(names, ", ")), true
}

// fsEtcSecrets: a secret the sandbox shows is a finding when its content can be read, or when the
// host has it (cordon verify says which it has): a sandbox that builds its /etc from the host's has no
// business showing it at all, readable today or not.
func fsEtcSecrets(_ context.Context, env *Env) Verdict {
	host := env.Canaries.EtcSecrets
	var found, absent, unknown []string
	for _, s := range etcSecrets {
		onHost := slices.Contains(host, s.path)
		what, readable := etcSeen(s)
		switch {
		case what != "" && (readable || onHost):
			found = append(found, what)
		case what != "":
			absent = append(absent, what+", not the host's")
		case len(host) > 0 && !onHost:
			unknown = append(unknown, s.path)
		default:
			absent = append(absent, s.path)
		}
	}
	if len(found) > 0 {
		return fail("%s", strings.Join(found, "; "))
	}
	ev := "absent: " + strings.Join(absent, ", ")
	if len(host) > 0 {
		ev = "absent, though the host has them: " + strings.Join(absent, ", ")
	}
	if len(unknown) > 0 {
		ev += "; not on the host either, so not tested: " + strings.Join(unknown, ", ")
	}
	return pass("%s", ev)
}

// devNode is a device a sandbox's /dev may hold, by name, with its device number.
type devNode struct{ major, minor uint32 }

// devAllowed are the device nodes of the documented /dev: harmless ones, each with the number it
// must have (a "null" that is really /dev/mem is the attack).
var devAllowed = map[string]devNode{
	"null": {1, 3}, "zero": {1, 5}, "full": {1, 7}, "random": {1, 8}, "urandom": {1, 9}, "tty": {5, 0},
}

// devLinks are the symbolic links of the documented /dev, with their targets.
var devLinks = map[string]string{
	"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
}

// hostDevices are device nodes a host has that a sandbox must not reach, tried by path whatever
// /dev lists: memory and I/O ports, the kernel log, hypervisor and vsock devices, disks and loop
// devices, consoles, the tun device, fuse, userfaultfd.
var hostDevices = []string{
	"/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/kvm", "/dev/vsock", "/dev/vhost-vsock",
	"/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/xvda", "/dev/loop0", "/dev/loop-control",
	"/dev/zram0", "/dev/btrfs-control", "/dev/console", "/dev/tty0", "/dev/ttyS0", "/dev/net/tun",
	"/dev/fuse", "/dev/userfaultfd", "/dev/hwrng", "/dev/cpu/0/msr", "/dev/dri/card0",
}

// gvisorDev are the entries gVisor's own /dev adds: its FUSE device (a device of gVisor's kernel,
// useless without the mount the seccomp filter refuses) and /dev/char, links to the nodes by number.
var gvisorDev = []string{"fuse", "char"}

func fsDevNodes(_ context.Context, env *Env) Verdict {
	gvisor := env.Canaries.Tier == "gvisor"
	var found []string
	ents, err := os.ReadDir("/dev")
	if err != nil {
		return skip("cannot list /dev: %v", err)
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		names = append(names, name)
		if gvisor && slices.Contains(gvisorDev, name) {
			if bad := checkGVisorDev(name); bad != "" {
				found = append(found, bad)
			}
			continue
		}
		if bad := checkDevEntry(name); bad != "" {
			found = append(found, bad)
		}
	}
	var opened []string
	for _, p := range hostDevices {
		if gvisor && p == "/dev/fuse" {
			continue
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			opened = append(opened, p)
		}
	}
	if len(opened) > 0 {
		found = append([]string{"opened " + strings.Join(opened, ", ")}, found...)
	}
	made, mknod := mknodAttempt(env)
	if made != "" {
		found = append([]string{made}, found...)
	}
	if len(found) > 0 {
		return fail("%s", joinSome(found, 12))
	}
	return pass("/dev holds %s; none of %d host devices opens by path; mknod: %s", strings.Join(names, " "), len(hostDevices), mknod)
}

// checkDevEntry says what is wrong with /dev/name, or "" when it is one of the documented entries.
func checkDevEntry(name string) string {
	p := "/dev/" + name
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return ""
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		want, ok := devAllowed[name]
		got := devNode{unix.Major(st.Rdev), unix.Minor(st.Rdev)}
		if !ok {
			return fmt.Sprintf("%s is a device %d:%d", p, got.major, got.minor)
		}
		if got != want {
			return fmt.Sprintf("%s is device %d:%d, not %d:%d", p, got.major, got.minor, want.major, want.minor)
		}
		return ""
	case unix.S_IFLNK:
		t, _ := os.Readlink(p)
		if want, ok := devLinks[name]; !ok || t != want {
			return fmt.Sprintf("%s is a link to %s", p, t)
		}
		return ""
	case unix.S_IFBLK:
		return fmt.Sprintf("%s is a block device %d:%d", p, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case unix.S_IFDIR:
		switch name {
		case "shm":
			return ""
		case "pts":
			return checkPts()
		}
		return p + " is a directory"
	}
	return fmt.Sprintf("%s is a file of type %#o", p, st.Mode&unix.S_IFMT)
}

// checkPts: /dev/pts may hold its ptmx and pseudo-terminals, nothing else.
func checkPts() string {
	ents, err := os.ReadDir("/dev/pts")
	if err != nil {
		return "/dev/pts cannot be listed: " + errName(unwrapPath(err))
	}
	for _, e := range ents {
		var st unix.Stat_t
		p := "/dev/pts/" + e.Name()
		if unix.Lstat(p, &st) != nil {
			continue
		}
		major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
		_, numErr := strconv.Atoi(e.Name())
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFCHR:
			return p + " is not a device"
		case e.Name() == "ptmx" && major == 5 && minor == 2:
		case numErr == nil && major >= 136 && major <= 143:
		default:
			return fmt.Sprintf("%s is a device %d:%d", p, major, minor)
		}
	}
	return ""
}

// checkGVisorDev checks gVisor's own additions: /dev/fuse its FUSE device, /dev/char links to the
// documented nodes only.
func checkGVisorDev(name string) string {
	p := "/dev/" + name
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return ""
	}
	if name == "fuse" {
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != 229 {
			return fmt.Sprintf("%s is not the FUSE device 10:229", p)
		}
		return ""
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return p + " cannot be listed: " + errName(unwrapPath(err))
	}
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(p, e.Name()))
		if err != nil {
			return fmt.Sprintf("%s/%s is not a link", p, e.Name())
		}
		if _, ok := devAllowed[filepath.Base(t)]; !ok && !slices.Contains(gvisorDev, filepath.Base(t)) && filepath.Base(t) != "ptmx" {
			return fmt.Sprintf("%s/%s links to %s", p, e.Name(), t)
		}
	}
	return ""
}

// mknodAttempt creates a character and a block device node in the probe's scratch directory: made
// names what was created (and removed again), refused what the kernel answered.
func mknodAttempt(env *Env) (made, refused string) {
	d, done, err := scratch(env)
	if err != nil {
		return "", err.Error()
	}
	defer done()
	var made1, errs []string
	for _, n := range []struct {
		name string
		mode uint32
		dev  uint64
	}{
		{"char 1:1 (memory)", unix.S_IFCHR, unix.Mkdev(1, 1)},
		{"block 7:0 (a loop device)", unix.S_IFBLK, unix.Mkdev(7, 0)},
	} {
		p := filepath.Join(d, "node")
		if err := unix.Mknod(p, n.mode|0o600, int(n.dev)); err != nil {
			errs = append(errs, n.name+": "+errName(err))
			continue
		}
		os.Remove(p)
		made1 = append(made1, n.name)
	}
	if len(made1) > 0 {
		return "created device nodes " + strings.Join(made1, ", "), ""
	}
	return "", strings.Join(errs, "; ")
}

// joinSome joins the first n of items and says how many more there were.
func joinSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:n], "; "), len(items)-n)
}
