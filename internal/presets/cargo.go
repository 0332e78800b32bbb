package presets

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// cargoView reads cargo's configuration the way cargo merges it (the workspace's .cargo/config.toml
// and its parents', then $CARGO_HOME/config.toml; CARGO_REGISTRIES_* variables), allows the index
// of every registry and source replacement it names, and gives the sandbox a CARGO_HOME of its own:
// the user's config.toml without tokens, each token of credentials.toml (or the configuration) a
// credential sent as cargo sends it (Authorization: TOKEN) to that registry's host, its placeholder
// in CARGO_REGISTRIES_<NAME>_TOKEN. The toolchain (~/.cargo/bin, rustup's home) is shown read-only;
// the rest of CARGO_HOME (credentials.toml) never is.
//
// cargo's built-in default registry is named by no configuration file, so it is not allowed here: a
// note says to replace it (source replacement) or allow its hosts.
func (s Source) cargoView(v *View) ([]policy.Endpoint, error) {
	home := lookup(s.Env, "HOME")
	cargoHome := lookup(s.Env, "CARGO_HOME")
	if cargoHome == "" && home != "" {
		cargoHome = filepath.Join(home, ".cargo")
	}
	rustupHome := lookup(s.Env, "RUSTUP_HOME")
	if rustupHome == "" && home != "" {
		rustupHome = filepath.Join(home, ".rustup")
	}
	var files []string // lowest precedence first
	if cargoHome != "" {
		files = append(files, filepath.Join(cargoHome, "config.toml"))
	}
	if s.Workspace != "" {
		var dirs []string
		for d := s.Workspace; ; d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if d == filepath.Dir(d) {
				break
			}
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			files = append(files, filepath.Join(dirs[i], ".cargo", "config.toml"))
		}
	}
	cfg := cargoConfig{Registries: map[string]cargoRegistry{}, Source: map[string]cargoSource{}}
	var userConfig map[string]any
	// The index each registry has in the user's config.toml or the environment: credentials.toml's
	// token for it goes there only, never to an index a project's config.toml put in its place.
	userIndex := map[string]string{}
	projectToken := map[string]string{} // registry → the token a project's config.toml gives it
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var c cargoConfig
		if _, err := toml.Decode(string(data), &c); err != nil {
			return nil, fmt.Errorf("preset cargo: %s: %w", f, tomlError(err))
		}
		cfg.merge(c)
		if cargoHome != "" && f == filepath.Join(cargoHome, "config.toml") {
			for name, r := range c.Registries {
				userIndex[name] = r.Index
			}
			if _, err := toml.Decode(string(data), &userConfig); err != nil {
				return nil, fmt.Errorf("preset cargo: %s: %w", f, tomlError(err))
			}
		} else {
			held := false
			for name, r := range c.Registries {
				if r.Token != "" {
					projectToken[name] = r.Token
					held = true
				}
			}
			if (held || c.Registry.Token != "") && s.Workspace != "" && strings.HasPrefix(f, s.Workspace+string(filepath.Separator)) {
				// A token in a project's config.toml: the sandbox, which shows the workspace, gets the
				// file without it (its tokens go to their registries from the gateway).
				var doc map[string]any
				if _, err := toml.Decode(string(data), &doc); err != nil {
					return nil, fmt.Errorf("preset cargo: %s: %w", f, tomlError(err))
				}
				stripCargoTokens(doc)
				var buf bytes.Buffer
				if err := toml.NewEncoder(&buf).Encode(doc); err != nil {
					return nil, fmt.Errorf("preset cargo: writing the sandbox's copy of %s: %w", f, err)
				}
				v.Files = append(v.Files, File{Path: f, Replaces: f, Content: buf.Bytes()})
			}
		}
	}
	// CARGO_REGISTRIES_<NAME>_INDEX and _TOKEN, as cargo reads them (the name upper-cased, - as _).
	for _, kv := range s.Env {
		k, val, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(k, "CARGO_REGISTRIES_")
		if !ok {
			continue
		}
		for name, r := range cfg.Registries {
			switch rest {
			case envName(name) + "_INDEX":
				r.Index = val
				userIndex[name] = val
			case envName(name) + "_TOKEN":
				r.Token = val
				delete(projectToken, name)
			}
			cfg.Registries[name] = r
		}
	}
	if cargoHome != "" {
		if data, err := os.ReadFile(filepath.Join(cargoHome, "credentials.toml")); err == nil {
			var creds cargoConfig
			if _, err := toml.Decode(string(data), &creds); err != nil {
				return nil, fmt.Errorf("preset cargo: %s: %w", filepath.Join(cargoHome, "credentials.toml"), tomlError(err))
			}
			for name, r := range creds.Registries {
				if have, ok := cfg.Registries[name]; ok && r.Token != "" && have.Token == "" {
					have.Token = r.Token
					cfg.Registries[name] = have
				}
			}
		}
	}

	var urls []string
	names := make([]string, 0, len(cfg.Registries))
	for name := range cfg.Registries {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		r := cfg.Registries[name]
		if r.Index == "" {
			continue
		}
		u := strings.TrimPrefix(r.Index, "sparse+")
		urls = append(urls, u)
		if r.Token == "" {
			continue
		}
		if r.Index != userIndex[name] && r.Token != projectToken[name] {
			// The user's token (config.toml, credentials.toml, the environment) with an index a
			// project's config.toml put in place of the user's: the token would go to the project's host.
			v.Notes = append(v.Notes, fmt.Sprintf("cargo: the token for registry %s is not used: a project's config.toml gives the registry another index (%s) than yours", name, r.Index))
			continue
		}
		host := hostOf(u)
		if !strings.HasPrefix(u, "https://") || host == "" {
			v.Notes = append(v.Notes, fmt.Sprintf("cargo: the token for registry %s is not used: its index is not HTTPS, and a credential is only ever sent over TLS", name))
			continue
		}
		t := Token{Name: tokenName("cargo", len(v.Tokens)+1), Host: host, Value: r.Token, Header: "Authorization", From: "cargo registry " + name}
		v.Tokens = append(v.Tokens, t)
		v.setEnv("CARGO_REGISTRIES_"+envName(name)+"_TOKEN", Ref(t.Name))
	}
	replaced := false
	for name, src := range cfg.Source {
		if src.Registry != "" {
			urls = append(urls, strings.TrimPrefix(src.Registry, "sparse+"))
		}
		if name == "crates-io" && src.ReplaceWith != "" {
			replaced = true
		}
	}
	if !replaced {
		v.Notes = append(v.Notes, "cargo: its built-in default registry is named by no configuration file, so the preset does not allow it: replace it ([source] in config.toml) or allow its hosts in network.allow")
	}
	var eps []policy.Endpoint
	if len(urls) > 0 {
		var err error
		if eps, err = urlEndpoints("cargo", urls); err != nil {
			return nil, err
		}
	}
	// The sandbox's CARGO_HOME is its own ($HOME/.cargo): the user's settings, tokens removed.
	if len(v.Tokens) > 0 {
		// Inside, the tokens are in the environment, where cargo's own provider reads them (a keyring
		// provider of the caller's would find nothing there).
		if userConfig == nil {
			userConfig = map[string]any{}
		}
		reg, _ := userConfig["registry"].(map[string]any)
		if reg == nil {
			reg = map[string]any{}
			userConfig["registry"] = reg
		}
		reg["global-credential-providers"] = []string{"cargo:token"}
	}
	if userConfig != nil {
		stripCargoTokens(userConfig)
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(userConfig); err != nil {
			return nil, fmt.Errorf("preset cargo: writing the sandbox's config.toml: %w", err)
		}
		v.Files = append(v.Files, File{HomeRel: ".cargo/config.toml", Content: buf.Bytes()})
	}
	if cargoHome != "" {
		if bin := filepath.Join(cargoHome, "bin"); v.hasDir(bin) {
			v.showToolchain(bin, ".")
		}
	}
	if rustupHome != "" && v.hasDir(rustupHome) {
		v.showToolchain(rustupHome)
		v.setEnv("RUSTUP_HOME", rustupHome)
	}
	if eps == nil {
		eps = []policy.Endpoint{}
	}
	return eps, nil
}

// cargoConfig is the part of cargo's configuration (and credentials.toml) that says where crates
// come from and with which tokens.
type cargoConfig struct {
	Registries map[string]cargoRegistry `toml:"registries"`
	Registry   struct {
		Default string `toml:"default"`
		Token   string `toml:"token"`
	} `toml:"registry"`
	Source map[string]cargoSource `toml:"source"`
}

type cargoRegistry struct {
	Index string `toml:"index"`
	Token string `toml:"token"`
}

type cargoSource struct {
	Registry    string `toml:"registry"`
	ReplaceWith string `toml:"replace-with"`
}

// merge lays c over cfg, key by key, as cargo merges a closer file over a farther one.
func (cfg *cargoConfig) merge(c cargoConfig) {
	for name, r := range c.Registries {
		have := cfg.Registries[name]
		if r.Index != "" {
			have.Index = r.Index
		}
		if r.Token != "" {
			have.Token = r.Token
		}
		cfg.Registries[name] = have
	}
	for name, src := range c.Source {
		have := cfg.Source[name]
		if src.Registry != "" {
			have.Registry = src.Registry
		}
		if src.ReplaceWith != "" {
			have.ReplaceWith = src.ReplaceWith
		}
		cfg.Source[name] = have
	}
	if c.Registry.Default != "" {
		cfg.Registry.Default = c.Registry.Default
	}
}

// stripCargoTokens removes every token (and credential provider setting) from a decoded config.
func stripCargoTokens(cfg map[string]any) {
	if r, ok := cfg["registry"].(map[string]any); ok {
		delete(r, "token")
		delete(r, "credential-provider")
	}
	if rs, ok := cfg["registries"].(map[string]any); ok {
		for _, r := range rs {
			if m, ok := r.(map[string]any); ok {
				delete(m, "token")
				delete(m, "credential-provider")
			}
		}
	}
}

// envName is a registry name as cargo spells it in an environment variable.
func envName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func hostOf(raw string) string {
	eps, err := urlEndpoints("cargo", []string{raw})
	if err != nil || len(eps) == 0 {
		return ""
	}
	return eps[0].Host
}

// tomlError is a parse error without the parser's text, which quotes what it found ("expected value
// but found \"TOKEN\"") and so a token written without its quotes.
func tomlError(err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("not valid TOML (line %d, after key %q)", pe.Position.Line, pe.LastKey)
	}
	return errors.New("not valid TOML")
}
