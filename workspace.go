package cordon

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// systemDirs are directories never exposed as a workspace: the agent would see (and through the
// workspace change) the system itself.
var systemDirs = []string{"/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys", "/dev", "/boot", "/run", "/var", "/tmp", "/home", "/root"}

// ResolveWorkspace returns the project directory Start would use for dir (empty: the current
// directory), with symlinks resolved, refusing directories whose exposure would defeat the sandbox:
// the root, system directories, and home (the caller's home directory) or anything containing it.
func ResolveWorkspace(dir, home string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("current directory: %w", err)
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("workspace %s: not a directory", dir)
	}
	for _, sys := range systemDirs {
		if real == sys {
			return "", fmt.Errorf("workspace %s: refusing to expose a system directory; run cordon in a project folder or pass --workspace", real)
		}
	}
	if home != "" {
		if h, err := filepath.EvalSymlinks(home); err == nil && within(h, real) {
			return "", fmt.Errorf("workspace %s: it contains your home directory (%s), which would expose ~/.ssh and other secrets; run cordon in a project folder or pass --workspace", real, h)
		}
	}
	return real, nil
}

// identity is who the command runs as inside: the caller's own uid (never root; a root caller gets
// uid 1000 inside, which the backend maps to cordon's reserved host range, never to host root) with
// a private, empty home. A caller without a name ($USER unset and no passwd entry, as a container's
// arbitrary uid is) keeps its uid, under the name "cordon".
func identity(env []string) sandbox.User {
	u := sandbox.User{UID: os.Getuid(), GID: os.Getgid(), Name: getenv(env, "USER"), Home: getenv(env, "HOME")}
	if u.Name == "" {
		if cu, err := user.Current(); err == nil {
			u.Name = cu.Username
		}
	}
	if u.UID == 0 || u.Name == "root" {
		u = sandbox.User{UID: 1000, GID: 1000, Name: "cordon", Home: "/home/cordon"}
	}
	if u.Name == "" {
		u.Name = "cordon"
	}
	if u.GID == 0 {
		u.GID = u.UID
	}
	if u.Home == "" || u.Home == "/" {
		u.Home = "/home/" + u.Name
	}
	return u
}

// within reports whether p is dir or lies below it (both cleaned, absolute).
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// getenv is the value of key in the caller's environment, the last entry winning as the cordon
// command has always read its own; "" when it is not set.
func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// envValue is the value of key in env, the first entry winning as with os.Getenv and the sandbox's
// environment (see sandboxenv); "" when it is not set.
func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
