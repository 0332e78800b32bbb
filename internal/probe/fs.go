//go:build linux

package probe

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

func fileSystemProbes() []Probe {
	return []Probe{
		{"fs.secret-direct", FileSystem, "read a secret file in the host user's home by its path", withSecretFile(secretDirect)},
		{"fs.secret-alias", FileSystem, "read it by alias paths (/proc/self/root, /proc/1/root, //, /./, ..)", withSecretFile(secretAlias)},
		{"fs.symlink-escape", FileSystem, "read it through a symlink created in the workspace", withSecretFile(symlinkEscape)},
		{"fs.hardlink-escape", FileSystem, "hard-link it into the workspace and read the link", withSecretFile(hardlinkEscape)},
		{"fs.write-outside", FileSystem, "create files in the host home and system directories", writeOutside},
		{"fs.mount", FileSystem, "mount a tmpfs (mount(2) without a new namespace)", mountAttempt},
		{"fs.leaked-fds", FileSystem, "look for descriptors inherited from outside (files, sockets, directories)", leakedFDs},
	}
}

// readSecret reports whether path holds the secret whose sha256 is want. It reads at most 1 MiB.
func readSecret(path, want string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return false, err
	}
	return Sum(b) == want, nil
}

// withSecretFile runs a probe that needs the secret-file canary, and skips it when there is none.
func withSecretFile(run func(*Env, *Secret) Verdict) func(context.Context, *Env) Verdict {
	return func(_ context.Context, env *Env) Verdict {
		if env.Canaries.SecretFile == nil {
			return skip("no secret-file canary given (cordon verify plants one)")
		}
		return run(env, env.Canaries.SecretFile)
	}
}

func secretDirect(env *Env, s *Secret) Verdict {
	ok, err := readSecret(s.Path, s.SHA256)
	switch {
	case ok:
		return fail("read %s: its sha256 matches the host secret", s.Path)
	case err != nil:
		return pass("%v", err)
	}
	return pass("%s is readable but is not the host's file (a private copy)", s.Path)
}

// aliases are other spellings of the same absolute path that a path filter could miss.
func aliases(p string) []string {
	dir, base := filepath.Split(p)
	out := []string{
		"/proc/self/root" + p,
		"/proc/thread-self/root" + p,
		"/proc/1/root" + p,
		"/" + strings.ReplaceAll(p, "/", "//"),
		filepath.Join(dir, ".") + "/./" + base,
		dir + "../" + filepath.Base(dir) + "/" + base,
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, p); err == nil {
			out = append(out, rel, "/proc/self/cwd/"+rel)
		}
	}
	return out
}

func secretAlias(env *Env, s *Secret) Verdict {
	for _, a := range aliases(s.Path) {
		if ok, _ := readSecret(a, s.SHA256); ok {
			return fail("read the host secret as %s", a)
		}
	}
	return pass("none of %d alias paths reached the host file", len(aliases(s.Path)))
}

// scratch makes a directory for links: inside the working directory (the workspace, where links are
// allowed) or, failing that, the temporary directory.
func scratch(env *Env) (string, func(), error) {
	for _, parent := range []string{env.Dir, os.TempDir()} {
		if parent == "" {
			continue
		}
		if d, err := os.MkdirTemp(parent, ".cordon-probe-"); err == nil {
			return d, func() { os.RemoveAll(d) }, nil
		}
	}
	return "", nil, errors.New("no writable directory for the probe's scratch files")
}

func symlinkEscape(env *Env, s *Secret) Verdict {
	d, done, err := scratch(env)
	if err != nil {
		return skip("%v", err)
	}
	defer done()
	links := map[string]string{
		filepath.Join(d, "file"): s.Path,
		filepath.Join(d, "dir"):  filepath.Dir(s.Path),
	}
	for l, target := range links {
		if err := os.Symlink(target, l); err != nil {
			return skip("cannot create a symlink to test: %v", err)
		}
	}
	for _, p := range []string{filepath.Join(d, "file"), filepath.Join(d, "dir", filepath.Base(s.Path))} {
		if ok, _ := readSecret(p, s.SHA256); ok {
			return fail("read the host secret through the symlink %s", p)
		}
	}
	return pass("symlinks to the secret and its directory lead nowhere")
}

func hardlinkEscape(env *Env, s *Secret) Verdict {
	d, done, err := scratch(env)
	if err != nil {
		return skip("%v", err)
	}
	defer done()
	l := filepath.Join(d, "hard")
	if err := os.Link(s.Path, l); err != nil {
		return pass("link refused: %v", err)
	}
	if ok, _ := readSecret(l, s.SHA256); ok {
		return fail("hard-linked the host secret to %s and read it", l)
	}
	return pass("the link was made but holds no host secret")
}

// writeTargets are the directories fs.write-outside tries: the canaries' host directories and the
// system directories every sandbox should keep read-only.
func writeTargets(env *Env) []string {
	dirs := append([]string{}, env.Canaries.WriteDirs...)
	return append(dirs, "/etc", "/usr", "/usr/local/bin", "/")
}

func writeOutside(_ context.Context, env *Env) Verdict {
	name := "cordon-probe-write"
	if env.Canaries.Nonce != "" {
		name += "-" + env.Canaries.Nonce
	}
	var written []string
	for _, d := range writeTargets(env) {
		p := filepath.Join(d, name)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			continue
		}
		f.WriteString("written by cordon probe; safe to delete\n")
		f.Close()
		written = append(written, p)
	}
	if len(written) == 0 {
		return pass("every write was refused")
	}
	// Beside the host's own secret, a written file is on the host.
	if s := env.Canaries.SecretFile; s != nil {
		if ok, _ := readSecret(s.Path, s.SHA256); ok {
			for _, p := range written {
				if filepath.Dir(p) == filepath.Dir(s.Path) {
					cleanup(written)
					return fail("created %s beside the host's secret file: the write reached the host", p)
				}
			}
		}
	}
	if env.Canaries.Nonce == "" {
		cleanup(written)
		return skip("created %s; this may be a private copy, and only the host can tell (cordon verify checks)", strings.Join(written, ", "))
	}
	return Verdict{Status: Skip, Evidence: "created " + strings.Join(written, ", ") + "; the host decides whether they escaped", Planted: written}
}

// cleanup removes what a probe wrote when no host will check it.
func cleanup(paths []string) {
	for _, p := range paths {
		os.Remove(p)
	}
}

func mountAttempt(_ context.Context, env *Env) Verdict {
	d, done, err := scratch(env)
	if err != nil {
		return skip("%v", err)
	}
	defer done()
	if err := unix.Mount("cordon-probe", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k"); err != nil {
		return pass("mount refused: %v", err)
	}
	unix.Unmount(d, unix.MNT_DETACH)
	return fail("mounted a tmpfs on %s", d)
}

func leakedFDs(_ context.Context, env *Env) Verdict {
	if env.FDs == nil {
		return skip("no descriptor snapshot taken at start (use NewEnv)")
	}
	if len(env.FDs) > 0 {
		return fail("descriptors inherited from outside: %s", strings.Join(env.FDs, "; "))
	}
	return pass("only the three standard streams were inherited")
}
