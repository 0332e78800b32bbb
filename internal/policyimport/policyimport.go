// Package policyimport translates another sandbox's settings into a cordon policy, so that a user
// who already keeps an allowlist for Anthropic's sandbox runtime (srt) or for Claude Code's sandbox
// has one policy across sandboxes instead of two that drift apart. The translation is printed, never
// applied: every setting either becomes a policy line with a comment saying where it came from, or a
// comment saying why cordon has no equivalent. Nothing is dropped silently.
//
// The formats are the ones the packages themselves define: srt's SandboxRuntimeConfigSchema
// (dist/sandbox/sandbox-config.js of @anthropic-ai/sandbox-runtime) and the "sandbox" object and
// "permissions" rules of Claude Code's settings.json (its SandboxSettings schema). testdata holds real
// files of both, with their origin.
package policyimport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// translation is what an import produces, rendered by render.
type translation struct {
	from, file string
	network    bool // a network section: srt and Claude Code deny all egress but what they list
	allow      []endpoint
	deny       []entry
	caFile     entry
	readwrite  []entry
	fsDeny     []entry
	envSet     []kv
	notes      []string // settings without an equivalent, each a sentence
}

type endpoint struct {
	host    string
	ports   []uint16
	comment string
}

type entry struct{ value, comment string }

type kv struct{ key, value string }

func (p *translation) note(format string, args ...any) {
	p.notes = append(p.notes, fmt.Sprintf(format, args...))
}

// decode reads a JSON object, keeping numbers as written.
func decode(data []byte, name string) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one JSON value", name)
	}
	return m, nil
}

// show is a setting's value as a note quotes it.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 120 {
		return string(b[:117]) + "..."
	}
	return string(b)
}

// strs reads a list of strings; anything else in it is noted, not dropped.
func (p *translation) strs(key string, v any) []string {
	list, ok := v.([]any)
	if !ok {
		p.note("%s: %s is not a list of strings, not imported", key, show(v))
		return nil
	}
	var out []string
	for _, it := range list {
		s, ok := it.(string)
		if !ok {
			p.note("%s: %s is not a string, not imported", key, show(it))
			continue
		}
		out = append(out, s)
	}
	return out
}

// sortedKeys lists m's keys in order, so that output is stable.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// domains turns srt-style domain entries ("host", "*.host", "host:port", "[v6]:port", IP literals)
// into network.allow endpoints. An entry without a port allows every port in srt; cordon lists
// ports, so it becomes 443 with a comment saying so.
func (p *translation) domains(key string, entries []string) {
	byHost := map[string]*endpoint{}
	for _, raw := range entries {
		host, port, err := splitDomain(raw)
		if err != nil {
			p.note("%s: %q: %v, not imported", key, raw, err)
			continue
		}
		if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			p.note("%s: %q is an IP address: cordon allows names only (pin a name to it with network.hosts and allow the name)", key, raw)
			continue
		}
		if host == "*" {
			p.note("%s: %q allows every host: cordon has no allow-all; list the hosts", key, raw)
			continue
		}
		e := byHost[host]
		if e == nil {
			e = &endpoint{host: host}
			byHost[host] = e
			p.allow = append(p.allow, *e)
		}
		if port == 0 {
			e.ports = append(e.ports, 443)
			e.comment = fmt.Sprintf("%s %q: every port there; cordon lists ports, 443 assumed: add others", key, raw)
		} else if !slices.Contains(e.ports, port) {
			e.ports = append(e.ports, port)
			if e.comment == "" {
				e.comment = fmt.Sprintf("%s %q", key, raw)
			}
		}
	}
	for i := range p.allow {
		if e := byHost[p.allow[i].host]; e != nil {
			p.allow[i] = *e
		}
	}
}

// deniedDomains turns srt-style denied entries into network.deny, which holds for every port.
func (p *translation) deniedDomains(key string, entries []string) {
	for _, raw := range entries {
		host, port, err := splitDomain(raw)
		switch {
		case err != nil:
			p.note("%s: %q: %v, not imported", key, raw, err)
		case host == "*":
			p.note("%s: %q denies everything: in cordon that is what is not in network.allow", key, raw)
		case strings.Trim(host, "[]") != host || isAddr(host):
			p.note("%s: %q is an IP address: cordon never connects to addresses anyway", key, raw)
		default:
			if port != 0 {
				p.note("%s: %q denies port %d only; network.deny of cordon holds for every port, so %s is denied whole", key, raw, port, host)
			}
			if !slices.ContainsFunc(p.deny, func(e entry) bool { return e.value == host }) {
				p.deny = append(p.deny, entry{host, key + " " + strconv.Quote(raw)})
			}
		}
	}
}

func isAddr(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// splitDomain splits "host[:port]" as srt writes it (IPv6 in brackets).
func splitDomain(s string) (string, uint16, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "" {
		return "", 0, fmt.Errorf("empty")
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("unclosed [")
		}
		host, port = s[:end+1], strings.TrimPrefix(s[end+1:], ":")
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if strings.Count(s, ":") > 1 {
			return "", 0, fmt.Errorf("an IPv6 address must be in brackets")
		}
		host, port = s[:i], s[i+1:]
	}
	if port == "" {
		return host, 0, nil
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return host, uint16(n), nil
}

// Paths. srt and Claude Code read the whole host unless told otherwise and write nowhere but what
// they list; cordon shows the sandbox nothing of the host but the workspace and what
// filesystem.readonly/readwrite name. So a host path denied for reading is already unreadable, and
// a workspace path denied becomes a filesystem.deny mask. Each format writes paths its own way; a
// pathForm turns one into a host path (absolute or ~) or a path relative to the workspace.
type pathForm func(string) (p string, host bool)

// srtPath: absolute, ~, or relative to the current directory (the workspace).
func srtPath(s string) (string, bool) {
	return s, strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~")
}

// sandboxPath is Claude Code's sandbox.filesystem form: "/x" and the older "//x" absolute, "~/x"
// home, "./x" or "x" relative to the project.
func sandboxPath(s string) (string, bool) {
	if strings.HasPrefix(s, "//") {
		return s[1:], true
	}
	return srtPath(s)
}

// rulePath is the form of Claude Code's Read(...) and Edit(...) rules: "//x" absolute, "~/x" home,
// "/x" relative to the project, "./x" or "x" relative.
func rulePath(s string) (string, bool) {
	switch {
	case strings.HasPrefix(s, "//"):
		return s[1:], true
	case strings.HasPrefix(s, "~"):
		return s, true
	}
	return strings.TrimPrefix(s, "/"), false
}

// workspaceGlob is a relative path as a filesystem.deny glob.
func workspaceGlob(s string) string {
	s = strings.TrimPrefix(s, "./")
	return strings.TrimSuffix(s, "/**")
}

func isWorkspace(s string) bool { return s == "" || s == "." || s == "./" || s == "./**" || s == "**" }

func (p *translation) denyRead(key string, paths []string, form pathForm) {
	for _, raw := range paths {
		s, host := form(raw)
		switch {
		case host:
			p.note("%s %q: already unreadable in cordon, which shows the sandbox nothing of the host beyond the workspace and what filesystem.readonly/readwrite list", key, raw)
		case isWorkspace(s):
			p.note("%s %q: the whole workspace: cordon always shows it (run the agent elsewhere instead)", key, raw)
		default:
			g := workspaceGlob(s)
			comment := key + " " + strconv.Quote(raw)
			if !strings.Contains(strings.TrimSuffix(g, "/"), "/") {
				comment += " (masked at any depth of the workspace, as a glob without a slash is)"
			}
			p.fsDeny = append(p.fsDeny, entry{g, comment})
		}
	}
}

func (p *translation) allowRead(key string, paths []string) {
	for _, s := range paths {
		p.note("%s %q: re-allows reading under a denied region; cordon shows nothing of the host unless filesystem.readonly lists it (add what the agent needs there)", key, s)
	}
}

func (p *translation) allowWrite(key string, paths []string, form pathForm) {
	for _, raw := range paths {
		s, host := form(raw)
		switch {
		case !host && isWorkspace(s):
			p.note("%s %q: the workspace is writable in cordon (a copy-on-write layer, reviewed before cordon apply)", key, raw)
		case host && (s == "/tmp" || strings.HasPrefix(s, "/tmp/") || s == "/private/tmp"):
			p.note("%s %q: the sandbox has its own empty /tmp in cordon, nothing of the host's", key, raw)
		case host:
			v := strings.TrimSuffix(strings.TrimSuffix(s, "/**"), "/")
			if strings.ContainsAny(v, "*?[") {
				p.note("%s %q: a glob; cordon mounts whole paths (list the directories)", key, raw)
				continue
			}
			p.readwrite = append(p.readwrite, entry{v, key + " " + strconv.Quote(raw) + ": writable in place, its changes are not reviewed"})
		default:
			p.note("%s %q: inside the workspace, which is writable in cordon (through review)", key, raw)
		}
	}
}

func (p *translation) denyWrite(key string, paths []string, form pathForm) {
	for _, raw := range paths {
		if _, host := form(raw); host {
			p.note("%s %q: cordon writes no host path unless filesystem.readwrite lists it", key, raw)
			continue
		}
		p.note("%s %q: cordon has no read-only workspace paths: every change is reviewed before cordon apply, and the persistence guard flags hooks and settings", key, raw)
	}
}

// checked keeps the entries cordon's parser accepts, each tried alone in the section it goes to, and
// turns every other one into a note with the parser's words: a value another sandbox takes (an
// environment name with a dot, a host with a space) is never written where it would stop the whole
// policy from loading, nor dropped.
func (p *translation) checked() {
	try := func(origin, doc string) bool {
		_, err := policy.Parse("check", []byte("version: 1\n"+doc), policy.Options{Home: "/nonexistent"})
		if err == nil {
			return true
		}
		msg := err.Error()
		var pe *policy.Error
		if errors.As(err, &pe) {
			msg = pe.Msg
		}
		p.note("%s: %s, not imported", origin, msg)
		return false
	}
	p.allow = slices.DeleteFunc(p.allow, func(e endpoint) bool {
		return !try(e.comment, fmt.Sprintf("network:\n  allow: [{host: %s, ports: [%s]}]\n", quote(e.host), ports(e.ports)))
	})
	p.deny = slices.DeleteFunc(p.deny, func(e entry) bool {
		return !try(e.comment, "network:\n  deny: ["+quote(e.value)+"]\n")
	})
	p.fsDeny = slices.DeleteFunc(p.fsDeny, func(e entry) bool {
		return !try(e.comment, "filesystem:\n  deny: ["+quote(e.value)+"]\n")
	})
	p.readwrite = slices.DeleteFunc(p.readwrite, func(e entry) bool {
		return !try(e.comment, "filesystem:\n  readwrite: ["+quote(e.value)+"]\n")
	})
	p.envSet = slices.DeleteFunc(p.envSet, func(e kv) bool {
		return !try("env."+e.key, "env:\n  set: {"+quote(e.key)+": "+quote(e.value)+"}\n")
	})
	if p.caFile.value != "" && !try(p.caFile.comment, "network:\n  tls: {caFile: "+quote(p.caFile.value)+"}\n") {
		p.caFile = entry{}
	}
}

// commentText is s made safe to end a line with: no line break or control character from another
// file's values can start a line of YAML.
func commentText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\u2028' || r == '\u2029' || r == '\u0085' || r == utf8.RuneError {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// render writes the policy as YAML, every line commented with its origin, the notes at the end.
func (p *translation) render() []byte {
	p.checked()
	var b strings.Builder
	fmt.Fprintf(&b, "# Imported by cordon policy import --from %s from %s.\n", p.from, p.file)
	b.WriteString("# Check it (cordon policy check FILE) and read the notes at the end: what has no equivalent.\nversion: 1\n")
	if len(p.readwrite) > 0 || len(p.fsDeny) > 0 {
		b.WriteString("filesystem:\n")
		writeList(&b, "readwrite", p.readwrite)
		writeList(&b, "deny", p.fsDeny)
	}
	if len(p.envSet) > 0 {
		b.WriteString("env:\n  set:\n")
		for _, e := range p.envSet {
			fmt.Fprintf(&b, "    %s: %s\n", quote(e.key), quote(e.value))
		}
	}
	switch {
	case p.network && (len(p.allow) > 0 || len(p.deny) > 0):
		b.WriteString("network:\n")
		if len(p.allow) > 0 {
			b.WriteString("  allow:\n")
			for _, e := range p.allow {
				fmt.Fprintf(&b, "    - {host: %s, ports: [%s]}", quote(e.host), ports(e.ports))
				if e.comment != "" {
					b.WriteString("  # " + commentText(e.comment))
				}
				b.WriteString("\n")
			}
		}
		writeList(&b, "deny", p.deny)
		if p.caFile.value != "" {
			fmt.Fprintf(&b, "  tls:\n    caFile: %s  # %s\n", quote(p.caFile.value), commentText(p.caFile.comment))
		}
	default:
		b.WriteString("# no network section: nothing leaves the sandbox (no domain was allowed)\n")
	}
	if len(p.notes) > 0 {
		b.WriteString("\n# Not imported (no equivalent in cordon, or not needed there):\n")
		for _, n := range p.notes {
			b.WriteString("# - " + commentText(n) + "\n")
		}
	}
	return []byte(b.String())
}

func writeList(b *strings.Builder, key string, es []entry) {
	if len(es) == 0 {
		return
	}
	key = strings.TrimLeft(key, " ")
	fmt.Fprintf(b, "  %s:\n", key)
	for _, e := range es {
		fmt.Fprintf(b, "    - %s  # %s\n", quote(e.value), commentText(e.comment))
	}
}

func ports(ps []uint16) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ", ")
}

// quote writes s as a YAML double-quoted scalar: Go's escapes are a subset of YAML's.
func quote(s string) string { return strconv.Quote(s) }
