package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// LocateEnv is what Locate needs to know about the caller, passed in rather than read from the process
// so that the choice is explicit and testable.
type LocateEnv struct {
	UID           int
	Home          string
	XDGConfigHome string
}

// SystemPolicyPath is root's policy file.
const SystemPolicyPath = "/etc/cordon/policy.yaml"

// Locate picks the policy file: explicit (from --policy) if non-empty, which must exist; otherwise
// $XDG_CONFIG_HOME/cordon/policy.yaml (XDG_CONFIG_HOME defaulting to Home/.config) for a non-root
// caller, or SystemPolicyPath for root. It returns "" when there is no such file, in which case the
// built-in default applies. Any other problem (unreadable directory, a directory where the file should
// be) is an error: a policy that exists but cannot be read must not silently become the default.
func Locate(explicit string, env LocateEnv) (string, error) {
	if explicit != "" {
		abs, err := filepath.Abs(explicit)
		if err != nil {
			return "", fmt.Errorf("policy file %s: %w", explicit, err)
		}
		if err := checkFile(abs); err != nil {
			return "", err
		}
		return abs, nil
	}
	p := DefaultPath(env)
	if p == "" {
		return "", nil
	}
	if err := checkFile(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return p, nil
}

// DefaultPath is where Locate looks when no file is named: SystemPolicyPath for root, else
// $XDG_CONFIG_HOME/cordon/policy.yaml (XDG_CONFIG_HOME defaulting to Home/.config); "" when neither
// is known. cordon policy suggest creates the file there for a run that had the built-in default.
func DefaultPath(env LocateEnv) string {
	switch {
	case env.UID == 0:
		return SystemPolicyPath
	case filepath.IsAbs(env.XDGConfigHome): // the XDG spec says to ignore a relative value
		return filepath.Join(env.XDGConfigHome, "cordon", "policy.yaml")
	case filepath.IsAbs(env.Home):
		return filepath.Join(env.Home, ".config", "cordon", "policy.yaml")
	}
	return ""
}

func checkFile(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("policy file: %w", err)
	}
	if fi.IsDir() {
		return fmt.Errorf("policy file %s: is a directory", p)
	}
	return nil
}

// CheckOutside refuses a policy file the sandboxed agent could edit: one that resolves to a place
// inside any writable directory, or that is reached through a symlink living inside one (the agent
// could retarget the link). Every hop of the resolution is checked, including symlinked parent
// directories and ".." components. Writable directories are compared both as given and resolved.
func CheckOutside(policyPath string, writable []string) error {
	abs, err := filepath.Abs(policyPath)
	if err != nil {
		return fmt.Errorf("policy file %s: %w", policyPath, err)
	}
	hops, err := resolveHops(abs)
	if err != nil {
		return fmt.Errorf("policy file %s: %w", policyPath, err)
	}
	for _, w := range writable {
		if !filepath.IsAbs(w) {
			return fmt.Errorf("writable directory %q is not absolute", w)
		}
		dirs := []string{filepath.Clean(w)}
		if resolved, err := filepath.EvalSymlinks(w); err == nil {
			dirs = append(dirs, resolved)
		}
		for _, h := range hops {
			for _, dir := range dirs {
				if within(h, dir) {
					return &InsideError{Path: policyPath, Dir: w}
				}
			}
		}
	}
	return nil
}

// InsideError is CheckOutside's refusal: the policy file at Path (as given) lies in, or is reached
// through, the writable directory Dir. It is a type so that callers can say what the refusal means
// for them (cordon policy check: that cordon run refuses the file too) without matching its words.
type InsideError struct {
	Path, Dir string
}

func (e *InsideError) Error() string {
	return fmt.Sprintf("policy file %s is inside %s, which the sandbox can write: keep the policy outside the workspace and writable mounts", e.Path, e.Dir)
}

// maxLinks bounds symlink resolution, as the kernel does, so a loop is an error rather than a hang.
const maxLinks = 40

// resolveHops resolves an absolute path like the kernel does, one component at a time, and returns
// the location of every symlink it followed, then the final, symlink-free path.
func resolveHops(abs string) ([]string, error) {
	var hops []string
	resolved := "/"
	rest := strings.Split(abs, "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxLinks {
			return nil, errors.New("too many levels of symbolic links")
		}
		hops = append(hops, next)
		target, err := os.Readlink(next)
		if err != nil {
			return nil, err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return append(hops, resolved), nil
}

// within reports whether p is dir or below it; both are clean absolute paths.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
