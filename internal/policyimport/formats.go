package policyimport

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// SRT translates the settings JSON of Anthropic's sandbox runtime (srt --settings FILE,
// ~/.srt-settings.json); name is the file, for the header and errors.
func SRT(name string, data []byte) ([]byte, error) {
	m, err := decode(data, name)
	if err != nil {
		return nil, err
	}
	p := &translation{from: "srt", file: name, network: true}
	for _, k := range sortedKeys(m) {
		v := m[k]
		switch k {
		case "network":
			p.networkSection("network", v)
		case "filesystem":
			p.filesystemSection("filesystem", v, srtPath)
		case "credentials":
			p.credentials("credentials", v)
		default:
			p.topLevel(k, v)
		}
	}
	return p.render(), nil
}

// ClaudeCode translates the sandbox section of a Claude Code settings.json, with the permission
// rules that feed it (WebFetch(domain:…) for the network, Read(…) and Edit(…) for paths) and the env
// Claude Code sets for its commands.
func ClaudeCode(name string, data []byte) ([]byte, error) {
	m, err := decode(data, name)
	if err != nil {
		return nil, err
	}
	p := &translation{from: "claude-code", file: name, network: true}
	sb, _ := m["sandbox"].(map[string]any)
	if sb == nil {
		p.note("the file has no sandbox section: only its permission rules and env are imported")
	}
	for _, k := range sortedKeys(sb) {
		v := sb[k]
		key := "sandbox." + k
		switch k {
		case "network":
			p.networkSection(key, v)
		case "filesystem":
			p.filesystemSection(key, v, sandboxPath)
		case "credentials":
			p.credentials(key, v)
		case "enabled":
			if v == true {
				p.note("%s true: cordon always sandboxes, the whole agent and not only its commands", key)
			} else {
				p.note("%s is %s: Claude Code ran commands unsandboxed; cordon always sandboxes", key, show(v))
			}
		case "failIfUnavailable":
			p.note("%s: cordon always refuses to start when a boundary cannot be set up (exit 125)", key)
		case "autoAllowBashIfSandboxed", "allowUnsandboxedCommands", "excludedCommands":
			p.note("%s %s: about which commands Claude Code runs in its sandbox; under cordon the whole agent and every command it runs are inside", key, show(v))
		default:
			p.topLevel(key, v)
		}
	}
	if perms, ok := m["permissions"].(map[string]any); ok {
		p.permissions(perms)
	}
	if env, ok := m["env"].(map[string]any); ok {
		for _, k := range sortedKeys(env) {
			if s, ok := env[k].(string); ok {
				p.envSet = append(p.envSet, kv{k, s})
			} else {
				p.note("env.%s: %s is not a string, not imported", k, show(env[k]))
			}
		}
	}
	for _, k := range sortedKeys(m) {
		switch k {
		case "sandbox", "permissions", "env", "$schema":
		default:
			p.note("%s: a Claude Code setting, not a sandbox one: not imported", k)
		}
	}
	return p.render(), nil
}

// permissionRule is a Claude Code permission rule: Tool or Tool(specifier), compiled on first use (not
// in package initialisation, which every cordon process pays).
var permissionRule = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([A-Za-z]+)(?:\((.*)\))?$`) })

// permissions imports the rules Claude Code merges into its sandbox: WebFetch(domain:X) into the
// allowed or denied domains, Read(X) deny into denyRead, Edit(X) into allowWrite or denyWrite.
func (p *translation) permissions(perms map[string]any) {
	var allowDomains, denyDomains []string
	for _, list := range []string{"allow", "deny", "ask"} {
		v, ok := perms[list]
		if !ok {
			continue
		}
		key := "permissions." + list
		for _, rule := range p.strs(key, v) {
			sub := permissionRule().FindStringSubmatch(rule)
			if sub == nil {
				p.note("%s %q: not a permission rule, not imported", key, rule)
				continue
			}
			tool, spec := sub[1], sub[2]
			switch {
			case tool == "WebFetch" && strings.HasPrefix(spec, "domain:") && list == "allow":
				allowDomains = append(allowDomains, strings.TrimPrefix(spec, "domain:"))
			case tool == "WebFetch" && strings.HasPrefix(spec, "domain:") && list == "deny":
				denyDomains = append(denyDomains, strings.TrimPrefix(spec, "domain:"))
			case tool == "Read" && list == "deny" && spec != "":
				p.denyRead(key+" Read", []string{spec}, rulePath)
			case tool == "Edit" && list == "allow" && spec != "":
				p.allowWrite(key+" Edit", []string{spec}, rulePath)
			case tool == "Edit" && list == "deny" && spec != "":
				p.denyWrite(key+" Edit", []string{spec}, rulePath)
			default:
				p.note("%s %q: a rule for Claude Code's own tools, which it keeps judging inside the sandbox; cordon has no equivalent", key, rule)
			}
		}
	}
	if len(allowDomains) > 0 {
		p.domains("permissions.allow WebFetch", allowDomains)
	}
	if len(denyDomains) > 0 {
		p.deniedDomains("permissions.deny WebFetch", denyDomains)
	}
	for _, k := range sortedKeys(perms) {
		switch k {
		case "allow", "deny", "ask":
		default:
			p.note("permissions.%s %s: Claude Code's own permission setting, not imported", k, show(perms[k]))
		}
	}
}

// networkSection imports the network settings both formats share.
func (p *translation) networkSection(key string, v any) {
	m := p.object(key, v)
	for _, k := range sortedKeys(m) {
		v, kk := m[k], key+"."+k
		switch k {
		case "allowedDomains":
			p.domains(kk, p.strs(kk, v))
		case "deniedDomains":
			p.deniedDomains(kk, p.strs(kk, v))
		case "deniedDomainReasons":
			p.note("%s: cordon's refusals name the host and the policy line that would allow it; custom reasons have no equivalent", kk)
		case "strictAllowlist":
			p.note("%s: cordon never asks: what network.allow does not list is refused", kk)
		case "deniedResolvedAddresses":
			p.note("%s %s: cordon's gateway never dials loopback, link-local, private or its own addresses for a name unless network.hosts pins it; other ranges have no equivalent", kk, show(v))
		case "allowUnixSockets", "allowAllUnixSockets":
			p.note("%s %s: the sandbox's unix sockets are its own (the host's are not mounted unless filesystem lists them)", kk, show(v))
		case "allowLocalBinding":
			p.note("%s %s: the sandbox has its own loopback; programs may listen on it", kk, show(v))
		case "allowMachLookup":
			p.note("%s: macOS only; cordon's backend is Linux", kk)
		case "httpProxyPort", "socksProxyPort", "mitmProxy", "parentProxy", "filterRequest":
			p.note("%s %s: cordon's gateway is the only way out and has no external proxy hook", kk, show(v))
		case "tlsTerminate":
			p.tlsTerminate(kk, v)
		default:
			p.note("%s %s: unknown to this importer, not imported", kk, show(v))
		}
	}
}

func (p *translation) tlsTerminate(key string, v any) {
	m := p.object(key, v)
	if m == nil {
		return
	}
	p.note("%s: cordon terminates TLS with a CA of the run's own where a rule needs to read requests (network.http, credentials, network.tls.inspect)", key)
	for _, k := range sortedKeys(m) {
		kk := key + "." + k
		switch k {
		case "extraCaCertPaths":
			paths := p.strs(kk, m[k])
			for i, path := range paths {
				if i == 0 {
					p.caFile = entry{path, kk + " " + strconv.Quote(path) + ": trusted for upstream servers"}
					continue
				}
				p.note("%s %q: network.tls.caFile takes one bundle (concatenate the PEM files)", kk, path)
			}
		case "caCertPath", "caKeyPath":
			p.note("%s: cordon makes a CA per run and keeps its key in memory only", kk)
		case "excludeDomains":
			p.note("%s %s: cordon terminates TLS only for hosts with network.http rules, credentials or tls.inspect; others pass through", kk, show(m[k]))
		default:
			p.note("%s %s: unknown to this importer, not imported", kk, show(m[k]))
		}
	}
}

func (p *translation) filesystemSection(key string, v any, form pathForm) {
	m := p.object(key, v)
	for _, k := range sortedKeys(m) {
		v, kk := m[k], key+"."+k
		switch k {
		case "denyRead":
			p.denyRead(kk, p.strs(kk, v), form)
		case "allowRead":
			p.allowRead(kk, p.strs(kk, v))
		case "allowWrite":
			p.allowWrite(kk, p.strs(kk, v), form)
		case "denyWrite":
			p.denyWrite(kk, p.strs(kk, v), form)
		case "allowGitConfig":
			p.note("%s %s: cordon keeps .git/config (and .git/hooks) read-only inside; changes to them go through review", kk, show(v))
		case "disabled":
			p.note("%s %s: cordon's file system boundary cannot be turned off", kk, show(v))
		case "allowManagedReadPathsOnly":
			p.note("%s: a Claude Code managed-settings switch, no equivalent", kk)
		default:
			p.note("%s %s: unknown to this importer, not imported", kk, show(v))
		}
	}
}

// credentials: srt hides or masks variables and files; cordon's environment starts empty and shows
// no host file, and a credential the agent may use is a placeholder injected by the gateway, which
// needs to know where the value goes (header or scheme), so that entry is noted with its template.
func (p *translation) credentials(key string, v any) {
	m := p.object(key, v)
	for _, k := range sortedKeys(m) {
		kk := key + "." + k
		switch k {
		case "envVars", "files":
			list, _ := m[k].([]any)
			for _, it := range list {
				e, _ := it.(map[string]any)
				name, _ := e["name"].(string)
				if k == "files" {
					name, _ = e["path"].(string)
				}
				mode, _ := e["mode"].(string)
				hosts, _ := e["injectHosts"].([]any)
				switch {
				case k == "envVars" && mode == "mask" && len(hosts) > 0:
					p.note("%s %s: masked and substituted on requests to %s; cordon's equivalent is a credentials entry {name: %s, from: {env: %s}, inject: {host: [...], header: ... or scheme: bearer}}: say where the value goes", kk, name, show(hosts), name, name)
				case k == "envVars":
					p.note("%s %s (%s): not passed; cordon's environment starts empty (env.pass copies a variable in)", kk, name, mode)
				default:
					p.note("%s %s (%s): not visible; cordon shows no host file unless filesystem lists it", kk, name, mode)
				}
			}
		default:
			p.note("%s %s: no equivalent", kk, show(m[k]))
		}
	}
}

// object is v as a JSON object, or nil (noted) when it is not one.
func (p *translation) object(key string, v any) map[string]any {
	m, ok := v.(map[string]any)
	if !ok {
		p.note("%s: %s is not an object, not imported", key, show(v))
	}
	return m
}

// topLevel notes the settings of the sandboxes' own mechanics.
func (p *translation) topLevel(k string, v any) {
	why := map[string]string{
		"ignoreViolations":             "cordon records every refusal in the audit log (cordon log --denied); none is ignored",
		"enableWeakerNestedSandbox":    "cordon has no weaker mode; sandbox.allowNesting lets tools inside create namespaces",
		"enableWeakerNetworkIsolation": "macOS only",
		"allowAppleEvents":             "macOS only",
		"allowPty":                     "the sandbox gets its own pty when cordon runs on a terminal",
		"ripgrep":                      "srt's own helper",
		"mandatoryDenySearchDepth":     "srt's own search; cordon's persistence guard checks the whole change at apply",
		"seccomp":                      "cordon's seccomp filter is built in",
		"bwrapPath":                    "cordon needs no bubblewrap",
		"socatPath":                    "cordon needs no socat",
		"javaAgentJarPath":             "cordon redirects every connection in the kernel; no proxy agent is needed",
		"windows":                      "Windows only",
		"git":                          "git configuration inside: set it with env.set (GIT_CONFIG_*) if needed",
	}
	base := k[strings.LastIndexByte(k, '.')+1:]
	if w, ok := why[base]; ok {
		p.note("%s: %s", k, w)
		return
	}
	p.note("%s %s: unknown to this importer, not imported", k, show(v))
}
