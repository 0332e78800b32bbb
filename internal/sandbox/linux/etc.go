//go:build linux

package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/javatrust"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// etcAllow lists what of the host's /etc programs need and that holds no secret: loader and locale
// configuration, the public CA bundle, shell start-up files, interpreters' system configuration. What
// is not listed is not there: shadow, sudoers, ssh, ssl/private, machine-id, package managers'
// configuration with possible tokens (npmrc, pip.conf), gitconfig with possible credential helpers,
// environment (pam_env's file, where proxy credentials and tokens end up).
// A user who wants more names it in filesystem.readonly.
var etcAllow = []string{
	"alternatives", "bash.bashrc", "bash_completion.d", "ca-certificates", "ca-certificates.conf",
	"debian_version", "ethertypes", "fonts", "gai.conf", "host.conf", "inputrc",
	"issue", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias", "locale.conf", "locale.gen",
	"localtime", "login.defs", "lsb-release", "magic", "magic.mime", "manpath.config", "mime.types",
	"netconfig", "networks", "nsswitch.conf", "os-release", "perl", "profile", "profile.d",
	"protocols", "python3", "rpc", "services", "shells", "ssl/certs", "ssl/openssl.cnf", "terminfo",
	"timezone", "vim", "wgetrc", "xattr.conf", "zsh",
}

// etcPrefixAllow admits versioned directories such as python3.11 or java-17-openjdk.
var etcPrefixAllow = []string{"python3.", "java-"}

// etcEntries resolves the allowlist against the host's /etc and adds the generated files: the
// sandbox's own passwd, group, hostname, hosts and resolv.conf.
func etcEntries(spec *sandbox.Spec, u sandbox.User) ([]etcEntry, error) {
	names := append([]string(nil), etcAllow...)
	if des, err := os.ReadDir("/etc"); err == nil {
		for _, de := range des {
			for _, p := range etcPrefixAllow {
				if strings.HasPrefix(de.Name(), p) {
					names = append(names, de.Name())
				}
			}
		}
	}
	sort.Strings(names)
	var out []etcEntry
	dirs := map[string]bool{}
	for _, name := range names {
		fi, err := os.Lstat(filepath.Join("/etc", name))
		if err != nil {
			continue
		}
		if parent := filepath.Dir(name); parent != "." && !dirs[parent] {
			dirs[parent] = true
			out = append(out, etcEntry{Name: parent, Kind: "dir-empty"})
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			t, err := os.Readlink(filepath.Join("/etc", name))
			if err != nil {
				return nil, err
			}
			out = append(out, etcEntry{Name: name, Kind: "symlink", Target: t})
		case fi.IsDir():
			out = append(out, etcEntry{Name: name, Kind: "dir"})
		case fi.Mode().IsRegular():
			out = append(out, etcEntry{Name: name, Kind: "file"})
		}
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = "cordon"
	}
	shell := "/bin/sh"
	if _, err := os.Stat("/bin/bash"); err == nil {
		shell = "/bin/bash"
	}
	hosts := "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	for _, h := range spec.Hosts {
		hosts += h + "\n"
	}
	resolv := spec.ResolvConf
	if resolv == "" {
		resolv = "# cordon: this sandbox has no name server\n"
	}
	out = append(out,
		etcEntry{Name: "passwd", Kind: "generated", Content: fmt.Sprintf(
			"root:x:0:0:root:/root:/usr/sbin/nologin\n%s:x:%d:%d:%s:%s:%s\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			u.Name, u.UID, u.GID, u.Name, u.Home, shell)},
		etcEntry{Name: "group", Kind: "generated", Content: fmt.Sprintf(
			"root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", u.Name, u.GID)},
		etcEntry{Name: "hostname", Kind: "generated", Content: hostname + "\n"},
		etcEntry{Name: "hosts", Kind: "generated", Content: hosts},
		etcEntry{Name: "resolv.conf", Kind: "generated", Content: resolv},
		etcEntry{Name: "mtab", Kind: "symlink", Target: "../proc/self/mounts"},
	)
	if len(spec.SSHKnownHosts) > 0 {
		out = append(out, etcEntry{Name: "ssh", Kind: "dir-empty"},
			etcEntry{Name: "ssh/ssh_known_hosts", Kind: "generated", Content: string(spec.SSHKnownHosts)})
	}
	if len(spec.TrustCA) > 0 {
		trust, err := trustEntries(spec.TrustCA)
		if err != nil {
			return nil, err
		}
		out = append(out, trust...)
	}
	return append(out, etcMountPoints(spec.Mounts, out)...), nil
}

// etcMountPoints makes room in the generated /etc for the policy's paths under it (filesystem.readonly:
// [/etc/apt], say): /etc is sealed read-only before the policy's paths are bound, so their mount
// points must exist by then. A path inside an entry already bound from the host needs none.
func etcMountPoints(mounts []sandbox.Mount, entries []etcEntry) []etcEntry {
	var out []etcEntry
	for _, m := range mounts {
		rel, ok := strings.CutPrefix(m.Path(), "/etc/")
		if !ok || rel == "" {
			continue
		}
		covered := false
		for _, e := range entries {
			if e.Name == rel || e.Kind != "dir-empty" && strings.HasPrefix(rel, e.Name+"/") {
				covered = true
				break
			}
		}
		fi, err := os.Stat(m.Source)
		if covered || err != nil {
			continue // a missing path is the mount's own error to report
		}
		kind := "file"
		if fi.IsDir() {
			kind = "dir"
		}
		out = append(out, etcEntry{Name: rel, Kind: "mountpoint", Target: kind})
	}
	return out
}

// systemBundle is where Debian and its derivatives keep the CA bundle that OpenSSL, curl, git, python
// and Go read by default.
const systemBundle = "ssl/certs/ca-certificates.crt"

// hostBundles are where distributions keep the system CA bundle (the list Go's crypto/x509 reads),
// Debian's first.
var hostBundles = []string{
	"/etc/" + systemBundle,
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// trustEntries adds the extra CAs: alone, with the host's bundle, and that bundle in place of the
// system one, so that programs which ignore SSL_CERT_FILE and its kin trust them too. Init copies the
// host's bundle itself (HostPrefix): cordon only finds it.
func trustEntries(ca []byte) ([]etcEntry, error) {
	var bundle string
	for _, f := range hostBundles {
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			// Resolved here, on the host: init opens it under the host's root, where an absolute
			// link would not lead to the same file.
			if bundle, err = filepath.EvalSymlinks(f); err == nil {
				break
			}
			bundle = ""
		}
	}
	// Java reads neither the bundle nor the variables: it gets a store of its own (JAVA_TOOL_OPTIONS
	// names it), the host's Java roots plus ca.
	java, err := javatrust.Build(javatrust.HostStores, bundle, ca)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's Java trust store: %w", err)
	}
	rel := func(p string) string { return strings.TrimPrefix(p, "/etc/") }
	out := []etcEntry{
		{Name: filepath.Dir(rel(sandbox.TrustedCAPath)), Kind: "dir-empty"},
		{Name: rel(sandbox.TrustedCAPath), Kind: "generated", Content: string(ca)},
		{Name: rel(sandbox.CABundlePath), Kind: "generated", Content: string(ca), HostPrefix: bundle},
		{Name: rel(sandbox.JavaTrustStorePath), Kind: "generated", Binary: java},
	}
	if _, err := os.Stat("/etc/" + systemBundle); err == nil {
		out = append(out, etcEntry{Name: systemBundle, Kind: "cover", Target: rel(sandbox.CABundlePath)})
	}
	return out, nil
}

// inlineEtcMax is the largest generated /etc file that travels inside the config; larger ones (the
// Java trust store, some 170 KB) go as descriptors. Inline, it and the CA bundle (which init now
// copies from the host, HostPrefix) took 6 ms to encode as JSON in cordon and 10 ms to decode in
// init, both on the start's path.
const inlineEtcMax = 16 << 10

// maxEtcFiles bounds the etcFilesMsg: the generated files that can be large are few.
const maxEtcFiles = 8

// etcOutOfBand moves the content of each generated entry larger than inlineEtcMax into a sealed
// memfd, which init copies into its /etc (buildEtc): it returns the entries with File set on those
// and the descriptors in File's order. On an error it closes what it made.
func etcOutOfBand(entries []etcEntry) ([]etcEntry, []*os.File, error) {
	var files []*os.File
	out := make([]etcEntry, len(entries))
	for i, e := range entries {
		out[i] = e
		if e.Kind != "generated" || len(e.Content)+len(e.Binary) <= inlineEtcMax {
			continue
		}
		if len(files) == maxEtcFiles {
			closeAll(files)
			return nil, nil, fmt.Errorf("more than %d large generated files", maxEtcFiles)
		}
		f, err := sealedFile("cordon-etc-"+filepath.Base(e.Name), append([]byte(e.Content), e.Binary...))
		if err != nil {
			closeAll(files)
			return nil, nil, fmt.Errorf("/etc/%s: %w", e.Name, err)
		}
		files = append(files, f)
		out[i].Content, out[i].Binary, out[i].File = "", nil, len(files)
	}
	return out, files, nil
}

// sealedFile is a memfd holding b that nobody can change any more (F_SEAL_WRITE and the rest).
func sealedFile(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("sealing: %w", err)
	}
	return f, nil
}

// receiveEtcFiles reads the etcFilesMsg with want descriptors from the status channel.
func receiveEtcFiles(sock, want int) ([]*os.File, error) {
	return receiveDescriptors(sock, kindEtcFiles, want, maxEtcFiles, "/etc files")
}
