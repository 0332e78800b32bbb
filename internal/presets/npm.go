package presets

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// npmView reads npm's effective configuration as npm itself resolves it in the workspace (the
// project's .npmrc, the user's, the global one, npm_config_* variables), allows the default and
// every scoped registry, and gives the sandbox a user config with those registries and the tokens
// replaced by placeholders. Files that hold auth lines and that the sandbox shows (the project's,
// a global one under /usr) are replaced by copies without them.
func (s Source) npmView(v *View) ([]policy.Endpoint, error) {
	if key := s.projectNpmPathKey(); key != "" {
		// npm honours them from the project's file, and cordon reads (userconfig, globalconfig) or
		// shows (prefix) the host paths they name: a cloned repository would pick which of the host's
		// files the sandbox gets.
		return nil, fmt.Errorf("preset npm: %s sets %s, which names a host path cordon would read or show the sandbox; remove it from the project's .npmrc (set it in ~/.npmrc instead)", filepath.Join(s.Workspace, ".npmrc"), key)
	}
	out, err := s.runIn(s.Workspace, "npm", "config", "list", "--json")
	if err != nil {
		return nil, fmt.Errorf("preset npm: asking npm for its configuration: %w", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		return nil, fmt.Errorf("preset npm: reading npm's configuration: %w", err)
	}
	str := func(k string) string { s, _ := cfg[k].(string); return s }
	registries := map[string]string{"": str("registry")} // scope ("" for the default) → URL
	for k := range cfg {
		if scope, ok := strings.CutSuffix(k, ":registry"); ok && strings.HasPrefix(scope, "@") {
			registries[scope] = str(k)
		}
	}
	scopes := make([]string, 0, len(registries))
	for sc := range registries {
		scopes = append(scopes, sc)
	}
	sort.Strings(scopes)
	var urls []string
	var user strings.Builder
	user.WriteString("# written by cordon: npm's effective registries, tokens replaced by placeholders\n")
	for _, sc := range scopes {
		u := registries[sc]
		urls = append(urls, u)
		if sc == "" {
			fmt.Fprintf(&user, "registry=%s\n", u)
		} else {
			fmt.Fprintf(&user, "%s:registry=%s\n", sc, u)
		}
	}
	eps, err := urlEndpoints("npm", urls)
	if err != nil {
		return nil, err
	}

	// Auth lines, lowest precedence first, so that a later level's token for a registry wins.
	files := []struct{ path, level string }{{str("globalconfig"), "global"}, {str("userconfig"), "user"}}
	if s.Workspace != "" {
		files = append(files, struct{ path, level string }{filepath.Join(s.Workspace, ".npmrc"), "project"})
	}
	userKept := ""
	tokens := map[string]Token{} // nerf-dart ("//host/path/") → token
	for _, f := range files {
		if f.path == "" {
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			continue
		}
		kept, auth := sanitizeNpmrc(string(data), s.Env)
		for _, a := range auth {
			if a.key != "_authToken" || a.nerf == "" {
				v.Notes = append(v.Notes, fmt.Sprintf("npm: %s in %s is not carried into the sandbox (only //host/:_authToken is); make it a credential", a.display(), f.path))
				continue
			}
			tokens[a.nerf] = Token{Value: a.value, Scheme: "bearer", From: f.path}
		}
		switch {
		case f.level == "user":
			// The user's settings stay (a cafile, strict-ssl); its registries and tokens follow.
			userKept = kept
		case len(auth) > 0:
			v.Files = append(v.Files, File{Path: f.path, Replaces: f.path, Content: []byte(kept)})
		}
	}
	// npm_config_//host/:_authToken=... in the environment wins over every file.
	for _, kv := range s.Env {
		k, val, _ := strings.Cut(kv, "=")
		if rest, ok := cutPrefixFold(k, "npm_config_"); ok && strings.HasPrefix(rest, "//") && strings.HasSuffix(rest, ":_authToken") {
			tokens[strings.TrimSuffix(rest, ":_authToken")] = Token{Value: val, Scheme: "bearer", From: "$" + k}
		}
	}
	nerfs := make([]string, 0, len(tokens))
	for n := range tokens {
		nerfs = append(nerfs, n)
	}
	sort.Strings(nerfs)
	for _, nerf := range nerfs {
		t := tokens[nerf]
		u, err := url.Parse("https:" + nerf)
		if err != nil || u.Hostname() == "" || t.Value == "" {
			continue
		}
		t.Host = strings.ToLower(u.Hostname())
		scheme, used := registryScheme(urls, t.Host)
		switch {
		case !used:
			// A token for a registry npm does not use here (an old one, another project's): the run
			// neither needs it nor allows its host.
			continue
		case scheme != "https":
			v.Notes = append(v.Notes, fmt.Sprintf("npm: the token for %s (in %s) is not used: the registry is not HTTPS, and a credential is only ever sent over TLS", t.Host, t.From))
			continue
		}
		t.Name = tokenName("npm", len(v.Tokens)+1)
		v.Tokens = append(v.Tokens, t)
		fmt.Fprintf(&user, "%s:_authToken=%s\n", nerf, Ref(t.Name))
	}
	v.Files = append(v.Files, File{HomeRel: ".npmrc", Content: []byte(userKept + user.String())})
	// node installed by nvm (or anywhere the sandbox does not show): its prefix, read-only.
	if prefix := str("prefix"); prefix != "" && filepath.IsAbs(prefix) {
		v.showToolchain(prefix, "bin")
	}
	return eps, nil
}

// npmAuth is an auth line of an npmrc: its key (without the registry part), the registry it is for
// ("//host/path/", empty for a top-level key) and its value.
type npmAuth struct {
	nerf, key, value string
}

func (a npmAuth) display() string {
	if a.nerf == "" {
		return a.key
	}
	return a.nerf + ":" + a.key
}

// npmAuthKeys are the keys npm reads credentials from, alone or after "//host/path/:".
var npmAuthKeys = []string{"_authToken", "_auth", "_password", "username", "certfile", "keyfile", "tokenHelper", "email"}

// npmEnvRef is an environment reference in .npmrc, ${NAME} or ${NAME?}, compiled on first use.
var npmEnvRef = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\$\{([^}?]+)(\?)?\}`) })

// sanitizeNpmrc returns the npmrc's text without its auth lines, and those lines with their values
// (environment references expanded from env as npm expands them).
func sanitizeNpmrc(text string, env []string) (kept string, auth []npmAuth) {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		k, val, ok := strings.Cut(trimmed, "=")
		if ok && !strings.HasPrefix(trimmed, "#") && !strings.HasPrefix(trimmed, ";") {
			// Keys as npm's ini reader takes them: trimmed and unquoted. Matched without regard to case,
			// so that no spelling of an auth key stays in a copy the sandbox sees.
			k, val = strings.Trim(strings.TrimSpace(k), `"'`), strings.Trim(strings.TrimSpace(val), `"'`)
			key := k
			if i := strings.LastIndexAny(k, ":."); i >= 0 {
				key = k[i+1:] // after a registry, a section or a scope ("//h/:_auth", "x._auth")
			}
			nerf := ""
			if i := strings.LastIndex(k, ":"); i > 0 && strings.HasPrefix(k, "//") && k[i+1:] == key {
				nerf = k[:i]
			}
			if slices.ContainsFunc(npmAuthKeys, func(a string) bool { return strings.EqualFold(a, key) }) {
				if strings.EqualFold(key, "_authToken") {
					key = "_authToken"
				}
				if key != "email" {
					auth = append(auth, npmAuth{nerf: nerf, key: key, value: expandNpm(val, env)})
				}
				continue
			}
			if u, err := url.Parse(expandNpm(val, env)); err == nil && u.User != nil {
				// A password in any URL (a proxy's, a registry's): the line is not shown, and the
				// note says so.
				auth = append(auth, npmAuth{key: k + " (a URL with a user name)"})
				continue
			}
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String(), auth
}

// expandNpm replaces ${NAME} (and ${NAME?}) by the variable's value, as npm does when it loads a file.
func expandNpm(s string, env []string) string {
	return npmEnvRef().ReplaceAllStringFunc(s, func(m string) string {
		sub := npmEnvRef().FindStringSubmatch(m)
		return lookup(env, sub[1])
	})
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// registryScheme reports whether one of the registry URLs is on host, and that one's scheme.
func registryScheme(urls []string, host string) (string, bool) {
	for _, raw := range urls {
		if u, err := url.Parse(raw); err == nil && strings.EqualFold(u.Hostname(), host) {
			return u.Scheme, true
		}
	}
	return "", false
}

// npmPathKeys are the npm settings that name host paths which cordon reads or shows: never taken from
// the project's .npmrc, which the repository (or an agent's accepted change) writes.
var npmPathKeys = []string{"userconfig", "globalconfig", "prefix", "cache"}

// projectNpmPathKey is the first of npmPathKeys the workspace's .npmrc sets (keys compared as npm
// might spell them: any case, _ for -), "" when none.
func (s Source) projectNpmPathKey() string {
	if s.Workspace == "" {
		return ""
	}
	data, err := os.ReadFile(filepath.Join(s.Workspace, ".npmrc"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, ";") {
			continue
		}
		k, _, _ := strings.Cut(trimmed, "=")
		k = strings.ReplaceAll(strings.ToLower(strings.Trim(strings.TrimSpace(k), `"'`)), "_", "-")
		if i := strings.LastIndexAny(k, ":."); i >= 0 {
			k = k[i+1:]
		}
		if slices.Contains(npmPathKeys, k) {
			return k
		}
	}
	return ""
}
