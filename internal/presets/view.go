package presets

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// View is what a run's presets give the sandbox besides the hosts they allow: the tool inside must
// read the same configuration the preset read outside, or it falls back to a default the policy does
// not allow. It carries the variables to set, the configuration files to show (every auth line
// removed), the tokens those lines held (the run makes each a credential the gateway injects, and
// the files and variables name its placeholder), and the toolchain directories to show read-only.
//
// A View is also the run's policy.PresetSource: the tools are asked once per run, and the gateway
// allows exactly the hosts whose configuration the sandbox was given.
type View struct {
	endpoints map[string][]policy.Endpoint
	// Env are NAME=VALUE entries for the sandbox's environment. A value may hold Ref(token.Name).
	Env []string
	// Files are generated configuration files to show inside, read-only.
	Files []File
	// Tokens are the secrets found in the configuration, each to become a credential.
	Tokens []Token
	// ReadOnly are host directories (toolchains) to show read-only at their own path.
	ReadOnly []string
	// PathDirs are directories the sandbox's PATH must have (a toolchain's bin), in order.
	PathDirs []string
	// Notes are one-line remarks for the user: what a preset could not carry over, and why.
	Notes []string
}

// File is a configuration file the sandbox sees in place of (or in the absence of) the host's.
type File struct {
	// Path is where it appears inside; when HomeRel is set, it is relative to the sandbox user's home
	// instead.
	Path    string
	HomeRel string
	// Replaces is the host file it stands for, if one exists (a mask the secret scan put there is then
	// replaced by this sanitized copy).
	Replaces string
	Content  []byte
}

// Token is a secret a tool's configuration holds for a registry. The sandbox never sees it: its files
// and variables hold Ref(Name), which the run turns into the credential's placeholder.
type Token struct {
	// Name is the credential's name (the variable holding its placeholder inside).
	Name string
	// Host is the registry's host name, the only one the value goes to.
	Host string
	// Value is the secret.
	Value string
	// Scheme is how it is sent: "bearer" (Authorization: Bearer) or "basic" (as a Basic password);
	// Header, when set, names the header that carries it as it is (cargo's Authorization: TOKEN).
	Scheme string
	Header string
	// From says where it was found, for messages (never the value).
	From string
}

// Ref is how configuration generated here names a token's placeholder until the run knows it.
func Ref(name string) string { return "${" + name + "}" }

// Preset implements policy.PresetSource with the endpoints read when the View was made.
func (v *View) Preset(name string) ([]policy.Endpoint, error) {
	eps, ok := v.endpoints[name]
	if !ok {
		return nil, fmt.Errorf("preset %q was not read for this run", name)
	}
	return eps, nil
}

var _ policy.PresetSource = (*View)(nil)

// Render replaces every Ref in the variables and files by the token's placeholder (placeholders maps
// token names to them) and returns the environment entries and files as the sandbox gets them.
func (v *View) Render(placeholders map[string]string) ([]string, []File) {
	pairs := make([]string, 0, 2*len(placeholders))
	for name, ph := range placeholders {
		pairs = append(pairs, Ref(name), ph)
	}
	r := strings.NewReplacer(pairs...)
	env := make([]string, len(v.Env))
	for i, kv := range v.Env {
		env[i] = r.Replace(kv)
	}
	files := make([]File, len(v.Files))
	for i, f := range v.Files {
		f.Content = []byte(r.Replace(string(f.Content)))
		files[i] = f
	}
	return env, files
}

// View asks the tools behind each named preset for their effective configuration (reading it from
// s.Workspace for the project's files) and returns what the sandbox needs to use them. A preset whose
// tool cannot say where its registry is fails the whole View: the run would not start with it.
func (s Source) View(names []string) (*View, error) {
	v := &View{endpoints: map[string][]policy.Endpoint{}}
	for _, name := range names {
		if _, done := v.endpoints[name]; done {
			continue
		}
		var eps []policy.Endpoint
		var err error
		switch name {
		case "npm":
			eps, err = s.npmView(v)
		case "go":
			eps, err = s.goView(v)
		case "pypi":
			eps, err = s.pipView(v)
		case "cargo":
			eps, err = s.cargoView(v)
		case "claude":
			eps, err = s.claudeView(v)
		case "maven":
			eps, err = s.mavenView(v)
		default:
			eps, err = s.Preset(name)
		}
		if err != nil {
			return nil, err
		}
		v.endpoints[name] = eps
	}
	return v, nil
}

// showToolchain adds root read-only (when it exists and the sandbox does not show it anyway) and its
// bin directories to the PATH.
func (v *View) showToolchain(root string, bins ...string) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return
	}
	if !systemShown(real) && !slices.Contains(v.ReadOnly, real) {
		v.ReadOnly = append(v.ReadOnly, real)
	}
	for _, b := range bins {
		if d := filepath.Join(root, b); !slices.Contains(v.PathDirs, d) {
			if _, err := os.Stat(d); err == nil {
				v.PathDirs = append(v.PathDirs, d)
			}
		}
	}
}

func (v *View) hasDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// systemShown reports whether dir is under a directory every sandbox shows (the system's programs).
func systemShown(dir string) bool {
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64"} {
		if dir == d || strings.HasPrefix(dir, d+"/") {
			return true
		}
	}
	return false
}

func (v *View) setEnv(name, value string) {
	for i, kv := range v.Env {
		if strings.HasPrefix(kv, name+"=") {
			v.Env[i] = name + "=" + value
			return
		}
	}
	v.Env = append(v.Env, name+"="+value)
}

// tokenName is the credential name for the n-th token of a preset (1-based).
func tokenName(preset string, n int) string {
	return fmt.Sprintf("CORDON_%s_TOKEN_%d", strings.ToUpper(preset), n)
}

// Toolchain names the preset that shows the toolchain dir belongs to ("" when none does), so that a
// command the sandbox cannot find there gets the right hint. env is the caller's environment.
func Toolchain(dir string, env []string) string {
	home := lookup(env, "HOME")
	for _, c := range []struct{ root, preset string }{
		{lookup(env, "NVM_DIR"), "npm"},
		{filepath.Join(home, ".nvm"), "npm"},
		{lookup(env, "PYENV_ROOT"), "pypi"},
		{filepath.Join(home, ".pyenv"), "pypi"},
		{filepath.Join(home, ".local", "share", "uv"), "pypi"},
		{lookup(env, "GOROOT"), "go"},
		{lookup(env, "CARGO_HOME"), "cargo"},
		{filepath.Join(home, ".cargo"), "cargo"},
		{lookup(env, "RUSTUP_HOME"), "cargo"},
		{filepath.Join(home, ".rustup"), "cargo"},
		{filepath.Join(home, "sdk"), "go"},
		{filepath.Join(home, "go"), "go"},
	} {
		if c.root != "" && home != "" && (dir == c.root || strings.HasPrefix(dir, c.root+"/")) {
			return c.preset
		}
	}
	// A Go distribution anywhere: its bin beside src/runtime.
	if filepath.Base(dir) == "bin" {
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "src", "runtime")); err == nil {
			return "go"
		}
	}
	return ""
}

// lookup is the value of key in env (the first entry, as os.Getenv), "" when unset.
func lookup(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// TokenList is v.Tokens, nil for a nil View (a run without a network section has no presets).
func (v *View) TokenList() []Token {
	if v == nil {
		return nil
	}
	return v.Tokens
}
