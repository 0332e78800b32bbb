// Package sandboxenv builds the sandboxed command's environment from nothing. The caller's environment
// is full of secrets (tokens, agent sockets, cloud credentials) that an agent must not see, so nothing
// is inherited: a fixed base, then only the variables the policy names.
package sandboxenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// DefaultPath is the sandbox's PATH when nothing else is known: system directories only. With
// Options.Shown the caller's PATH is kept instead, but only its directories the sandbox shows (a PATH
// entry into a hidden place finds nothing inside and would only mislead), and DefaultPath's
// directories follow it.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Identity is who the command runs as inside the sandbox, and whether it has a terminal.
type Identity struct {
	User, Home string
	TTY        bool
}

// Build returns the command's environment: PATH, HOME, USER, LOGNAME, SHELL (/bin/bash if it exists,
// else /bin/sh), TERM (the caller's on a terminal, else "dumb"), LANG (the caller's or C.UTF-8), then
// the env.pass names the caller has set, then env.set, each later entry replacing an earlier one of the
// same name. caller is in os.Environ form. It also returns one warning for each secret-shaped name that
// env.pass or env.set puts into the sandbox.
func Build(caller []string, p policy.Env, id Identity) (env []string, warnings []string) {
	return build(caller, p, id, Options{}, exists)
}

// Options are what the run adds to the environment besides the policy.
type Options struct {
	// Presets are NAME=VALUE entries the network presets set (a tool's registry settings): after the
	// base, before env.pass and env.set, which override them.
	Presets []string
	// Shown reports whether a host directory appears inside at the same path. When set, PATH is the
	// caller's PATH with only the shown directories kept, then PathDirs, then DefaultPath's, each once.
	Shown func(dir string) bool
	// PathDirs are toolchain directories the PATH must have (a preset's), after the caller's.
	PathDirs []string
}

// BuildWith is Build with the run's additions (see Options).
func BuildWith(caller []string, p policy.Env, id Identity, o Options) (env []string, warnings []string) {
	return build(caller, p, id, o, exists)
}

// searchPath is the caller's PATH kept to what the sandbox shows, then dirs, then DefaultPath.
func searchPath(callerPath string, shown func(string) bool, dirs []string) string {
	var keep []string
	add := func(d string) {
		if filepath.IsAbs(d) && !slices.Contains(keep, filepath.Clean(d)) {
			keep = append(keep, filepath.Clean(d))
		}
	}
	for _, d := range filepath.SplitList(callerPath) {
		// Relative entries ("", ".") would search wherever the command happens to be: never kept.
		if filepath.IsAbs(d) && shown(filepath.Clean(d)) {
			add(d)
		}
	}
	for _, d := range dirs {
		add(d)
	}
	for _, d := range filepath.SplitList(DefaultPath) {
		add(d)
	}
	return strings.Join(keep, ":")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func build(caller []string, p policy.Env, id Identity, o Options, exists func(string) bool) (env []string, warnings []string) {
	from := parse(caller)
	e := &ordered{index: map[string]int{}}

	path := DefaultPath
	if o.Shown != nil {
		path = searchPath(from["PATH"], o.Shown, o.PathDirs)
	}
	e.set("PATH", path)
	e.set("HOME", id.Home)
	e.set("USER", id.User)
	e.set("LOGNAME", id.User)
	shell := "/bin/sh"
	if exists("/bin/bash") {
		shell = "/bin/bash"
	}
	e.set("SHELL", shell)
	term := "dumb"
	if t, ok := from["TERM"]; ok && id.TTY && safeTerm(t) {
		term = t
	}
	e.set("TERM", term)
	lang := "C.UTF-8"
	if l, ok := from["LANG"]; ok && l != "" {
		lang = l
	}
	e.set("LANG", lang)
	for _, kv := range o.Presets {
		if name, v, ok := strings.Cut(kv, "="); ok {
			e.set(name, v)
		}
	}

	for _, name := range p.Pass {
		v, ok := from[name]
		if !ok {
			continue
		}
		e.set(name, v)
		if SecretShaped(name) {
			warnings = append(warnings, warning(name, "env.pass", p))
		}
	}
	names := make([]string, 0, len(p.Set))
	for name := range p.Set {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e.set(name, p.Set[name])
		if SecretShaped(name) {
			warnings = append(warnings, warning(name, "env.set", p))
		}
	}
	return e.list, warnings
}

// warning names where the variable came from: the file's section, or the flag that gave it.
func warning(name, section string, p policy.Env) string {
	where := section
	if slices.Contains(p.FromFlag, name) {
		where = "-e " + name
	}
	return fmt.Sprintf("cordon: warning: passing secret-shaped variable %s into the sandbox (%s)", name, where)
}

// parse reads os.Environ-style entries; the first of duplicate names wins, as with os.Getenv.
func parse(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := m[k]; !dup {
			m[k] = v
		}
	}
	return m
}

// safeTerm accepts terminal type names only, so TERM cannot carry a path for terminfo lookups.
func safeTerm(t string) bool {
	if t == "" || len(t) > 64 {
		return false
	}
	for _, c := range []byte(t) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._+-", c) >= 0) {
			return false
		}
	}
	return true
}

// ordered is an environment that keeps first-set order and one entry per name.
type ordered struct {
	list  []string
	index map[string]int
}

func (o *ordered) set(name, value string) {
	kv := name + "=" + value
	if i, ok := o.index[name]; ok {
		o.list[i] = kv
		return
	}
	o.index[name] = len(o.list)
	o.list = append(o.list, kv)
}

// SecretShaped reports whether a variable name looks like it holds a secret (an API key, a password,
// a cloud credential, an agent socket or a connection string with a password in it), so that naming
// one in env.pass or env.set gets a warning. It errs on the side of warning.
func SecretShaped(name string) bool {
	n := strings.ToUpper(name)
	// Fragments that mark a name as a secret wherever they appear in one of its _-separated words.
	secretWords := []string{"TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "SESSION", "COOKIE", "PRIVATE"}
	for _, seg := range strings.Split(n, "_") {
		if seg == "AUTHOR" || seg == "AUTHORS" { // GIT_AUTHOR_NAME is not a secret
			continue
		}
		for _, w := range secretWords {
			if strings.Contains(seg, w) {
				return true
			}
		}
	}
	for _, prefix := range []string{"AWS_", "AZURE_", "GCP_", "GOOGLE_", "GCLOUD_", "VAULT_", "DOCKER_AUTH"} {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	for _, suffix := range []string{"_PAT", "_DSN", "_PASS", "_PWD", "_CONNECTION_STRING", "_CONN_STR"} {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	return slices.Contains([]string{
		"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DATABASE_URL", "REDIS_URL", "MONGODB_URI", "MONGO_URL", "AMQP_URL",
		"KUBECONFIG", "NETRC", "PGPASSFILE", "DOCKER_CONFIG", "NPM_CONFIG_USERCONFIG",
	}, n)
}
