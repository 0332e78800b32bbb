package workspace

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// Risk is a change that would let the agent run code on the host later, after the sandbox is gone:
// a git hook, an editor task, a direnv file, a new executable. Apply and Export refuse these
// unless the user asks for them (IncludeRisky), and Never ones always.
type Risk struct {
	Path   string
	Rule   string
	Reason string
	// Never marks a risk that IncludeRisky does not override: a symlink that resolves outside the
	// project would let later writes through it land anywhere.
	Never bool
}

// String is the one line cordon prints for a risk.
func (r Risk) String() string { return r.Path + ": " + r.Reason }

// pathRule flags changes to files that a tool on the host reads and acts on: each rule names the
// tool and what it would run, so the user can judge.
type pathRule struct {
	name string
	// glob is matched case-insensitively against the whole path, segment by segment; "**" matches
	// any number of segments (so rules also hold in nested directories and repositories).
	glob   string
	reason string
}

// pathRules are the persistence vectors recognised by name alone. Git's own files are handled by
// gitDirRisk, .gitattributes and .git/config by their content.
var pathRules = []pathRule{
	{"gitmodules", "**/.gitmodules", "submodule URLs and `update = !command` run when the user updates submodules"},
	{"direnv", "**/.envrc", "direnv runs .envrc when the user enters the directory"},
	{"direnv", "**/.env.local", "direnv (dotenv_if_exists) and tools may source it"},
	{"vscode-tasks", "**/.vscode/tasks.json", "VS Code runs tasks (some on folder open)"},
	{"vscode-settings", "**/.vscode/settings.json", "VS Code settings can point tools (terminal, linters, formatters) at programs"},
	{"vscode-launch", "**/.vscode/launch.json", "VS Code debug launch configurations run programs"},
	{"vscode-extensions", "**/.vscode/extensions.json", "VS Code suggests installing the extensions it names"},
	{"devcontainer", "**/.devcontainer/**", "dev container configuration runs commands and images on the host's Docker"},
	{"devcontainer", "**/.devcontainer.json", "dev container configuration runs commands and images on the host's Docker"},
	{"claude-settings", "**/.claude/settings*.json", "Claude Code settings define hooks and permissions that run commands"},
	{"claude-commands", "**/.claude/commands/**", "Claude Code slash commands can run shell commands"},
	{"claude-agents", "**/.claude/agents/**", "Claude Code subagents carry their own tool permissions"},
	{"mcp", "**/.mcp.json", "MCP server definitions start programs when an agent opens the project"},
	{"codex", "**/.codex/**", "Codex configuration defines commands and MCP servers"},
	{"cursor", "**/.cursor/**", "Cursor rules and MCP configuration start programs"},
	{"idea", "**/.idea/workspace.xml", "JetBrains run configurations run programs"},
	{"githooks-dir", "**/.husky/**", "husky installs these as git hooks"},
	{"pre-commit", "**/.pre-commit-config.yaml", "pre-commit runs these hooks on every commit"},
	// Tool configuration that cordon's presets also read: besides what the tool itself does with it,
	// a registry it names is allowed on the next run, so an applied change would widen the policy.
	{"npmrc", "**/.npmrc", "npm takes registries, scripts settings and a shell from it; cordon's npm preset allows the registries it names"},
	{"cargo-config", "**/.cargo/config.toml", "cargo runs the rustc wrappers and runners it names; cordon's cargo preset allows the registries it names"},
	{"cargo-config", "**/.cargo/config", "cargo runs the rustc wrappers and runners it names; cordon's cargo preset allows the registries it names"},
	{"pip-conf", "**/pip.conf", "pip (in a virtualenv) takes its index from it; cordon's pypi preset allows it"},
	{"maven-config", "**/.mvn/**", "Maven loads the extensions and options it names; cordon's maven preset reads its settings"},
}

// gitSafe are the parts of a git directory that git only reads as data: objects and refs, which an
// agent's commits create, and bookkeeping files that name refs or record messages.
var gitSafe = map[string]bool{
	"objects": true, "refs": true, "logs": true, "rr-cache": true,
	"head": true, "orig_head": true, "fetch_head": true, "merge_head": true, "merge_msg": true,
	"commit_editmsg": true, "index": true, "packed-refs": true, "description": true,
	"shallow": true, "info/exclude": true, "info/refs": true,
}

// configRule flags git config variables that make git run a program (or read another file that
// could): section and name are lower case; sub "*" requires a subsection, "" forbids one, and "?"
// accepts either; value, when set, must also hold.
type configRule struct {
	section, sub, name string
	value              func(string) bool
	reason             string
}

func bang(v string) bool { return strings.HasPrefix(strings.TrimSpace(v), "!") }
func extURL(v string) bool {
	v = strings.ToLower(v)
	return strings.HasPrefix(v, "ext::") || strings.HasPrefix(v, "fd::")
}

var configRules = []configRule{
	{"core", "", "hookspath", nil, "moves git hooks to a directory the agent chose"},
	{"core", "", "fsmonitor", nil, "git runs the fsmonitor program on most commands"},
	{"core", "", "sshcommand", nil, "git runs it for every ssh fetch or push"},
	{"core", "", "pager", nil, "git runs the pager for most output"},
	{"core", "", "editor", nil, "git runs the editor for commits and rebases"},
	{"core", "", "askpass", nil, "git runs it to ask for passwords"},
	{"core", "", "gitproxy", nil, "git runs it to connect to git:// remotes"},
	{"core", "", "alternaterefscommand", nil, "git runs it on fetch and push"},
	{"core", "", "worktree", nil, "points git's work tree somewhere else"},
	{"core", "", "attributesfile", nil, "loads attributes (and so filter drivers) from another file"},
	{"sequence", "", "editor", nil, "git runs it for interactive rebases"},
	{"diff", "", "external", nil, "git runs it for every diff"},
	{"diff", "*", "textconv", nil, "git runs the text conversion program on diffs"},
	{"diff", "*", "command", nil, "git runs the external diff driver"},
	{"merge", "*", "driver", nil, "git runs the merge driver on merges"},
	{"filter", "?", "", nil, "clean/smudge/process filters run on checkout, add and status"},
	{"credential", "?", "helper", nil, "git runs the credential helper and hands it credentials"},
	{"include", "", "path", nil, "includes another config file the agent may control"},
	{"includeif", "*", "path", nil, "includes another config file the agent may control"},
	{"alias", "?", "", bang, "a `!` alias runs a shell command when the user types it"},
	{"pager", "?", "", nil, "git runs it as the pager for a command"},
	{"gpg", "?", "program", nil, "git runs it to sign or verify"},
	{"uploadpack", "", "packobjectshook", nil, "git runs it when serving fetches"},
	{"remote", "*", "uploadpack", nil, "git runs it for fetches from this remote"},
	{"remote", "*", "receivepack", nil, "git runs it for pushes to this remote"},
	{"remote", "*", "url", extURL, "ext:: and fd:: URLs run commands"},
	{"remote", "*", "pushurl", extURL, "ext:: and fd:: URLs run commands"},
	{"url", "*", "insteadof", nil, "rewrites remote URLs (for example to ext:: commands)"},
	{"url", "*", "pushinsteadof", nil, "rewrites remote URLs (for example to ext:: commands)"},
	{"protocol", "?", "allow", nil, "can enable the ext:: transport, which runs commands"},
	{"submodule", "*", "update", bang, "`update = !command` runs a command on submodule update"},
	{"mergetool", "*", "cmd", nil, "git mergetool runs it"},
	{"difftool", "*", "cmd", nil, "git difftool runs it"},
	{"web", "", "browser", nil, "git web--browse runs it"},
	{"browser", "*", "", nil, "git web--browse runs it"},
	{"man", "*", "", nil, "git help runs it"},
	{"sendemail", "?", "", nil, "git send-email may run smtpserver and other commands"},
	{"init", "", "templatedir", nil, "copies hooks into every new repository"},
	{"instaweb", "", "", nil, "git instaweb runs the configured http daemon"},
}

func (r configRule) match(e configEntry) bool {
	if e.Section != r.section || (r.name != "" && e.Name != r.name) {
		return false
	}
	if (r.sub == "*" && !e.HasSub) || (r.sub == "" && e.HasSub) {
		return false
	}
	return r.value == nil || r.value(e.Value)
}

// builtinMerge are merge drivers git implements itself; a .gitattributes may name them freely.
var builtinMerge = map[string]bool{"text": true, "binary": true, "union": true}

// builtinDiff are git's built-in diff drivers (function-name patterns), which run nothing.
var builtinDiff = map[string]bool{"ada": true, "bash": true, "bibtex": true, "cpp": true, "csharp": true, "css": true,
	"dts": true, "elixir": true, "fortran": true, "fountain": true, "golang": true, "html": true, "java": true,
	"kotlin": true, "markdown": true, "matlab": true, "objc": true, "pascal": true, "perl": true, "php": true,
	"python": true, "ruby": true, "rust": true, "scheme": true, "tex": true}

// Guard lists the run's changes that would run code on the host later, with a reason each. A patch
// run's changes are judged as they would be applied, so the project must be at the run's base (a
// *ConflictError says where it is not).
func Guard(run *runstate.Run) ([]Risk, error) {
	info, err := LoadInfo(run)
	if err != nil {
		return nil, err
	}
	cs, err := changesFor(run, info)
	if err != nil {
		return nil, err
	}
	return guard(info.Project, cs)
}

func guard(project string, cs []Change) ([]Risk, error) {
	var out []Risk
	v := newView(project, cs)
	for _, c := range cs {
		rs, err := riskOf(project, c, v)
		if err != nil {
			return nil, fmt.Errorf("workspace: guard %s: %w", c.Path, err)
		}
		out = append(out, rs...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func riskOf(project string, c Change, v *view) ([]Risk, error) {
	var out []Risk
	add := func(rule, reason string) { out = append(out, Risk{Path: c.Path, Rule: rule, Reason: reason}) }
	lower := strings.ToLower(c.Path)
	segs := strings.Split(lower, "/")

	// Git directories, at any depth (a nested repository the agent created counts too).
	for i, s := range segs {
		if s != ".git" {
			continue
		}
		rest := segs[i+1:]
		if len(rest) == 0 {
			if c.Kind != Deleted && !c.Mode.IsDir() {
				add("gitdir-link", "a .git file or link makes git use another directory's config and hooks")
			}
			break
		}
		if r, ok, err := gitDirRisk(project, c, rest); err != nil {
			return nil, err
		} else if ok {
			add(r.Rule, r.Reason)
		}
		break
	}
	if c.Kind == Deleted {
		return out, nil
	}
	for _, r := range pathRules {
		if globMatch(r.glob, lower) {
			add(r.name, r.reason)
		}
	}
	if path.Base(lower) == ".gitattributes" || strings.HasSuffix(lower, ".git/info/attributes") {
		rs, err := attributesRisk(project, c)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			add("gitattributes-driver", r)
		}
	}
	perm, old := c.Mode, c.OldMode
	if c.Kind == Added {
		old = 0
	}
	if perm.IsRegular() && perm&0o111 != 0 && perm&0o111&^old != 0 {
		add("new-executable", fmt.Sprintf("gains execute permission (%v): it could be run by name later", perm.Perm()))
	}
	if perm&(fs.ModeSetuid|fs.ModeSetgid) != 0 && perm&(fs.ModeSetuid|fs.ModeSetgid)&^old != 0 {
		add("setid", "setuid/setgid bit: runs with its owner's privileges")
	}
	switch {
	case perm&fs.ModeDevice != 0:
		add("device", "device file: gives access to hardware or kernel interfaces")
	case perm&fs.ModeNamedPipe != 0:
		add("fifo", "named pipe: can block or feed tools that open it")
	case perm&fs.ModeSocket != 0:
		add("socket", "socket file")
	case perm&fs.ModeSymlink != 0:
		if ok, why := v.inside(c.Path, c.Target); !ok {
			out = append(out, Risk{Path: c.Path, Rule: "symlink-outside", Never: true,
				Reason: fmt.Sprintf("symlink to %q resolves outside the project (%s)", c.Target, why)})
		}
	}
	return out, nil
}

// gitDirRisk judges a change inside a git directory; rest is the lower-cased path below ".git".
func gitDirRisk(project string, c Change, rest []string) (Risk, bool, error) {
	// Nested git directories (submodules, worktrees) have the same layout further down.
	for len(rest) > 2 && (rest[0] == "modules" || rest[0] == "worktrees") {
		rest = rest[2:]
		for len(rest) > 0 && !gitSafe[rest[0]] && rest[0] != "config" && rest[0] != "config.worktree" && rest[0] != "hooks" && len(rest) > 1 {
			rest = rest[1:] // submodule names may contain slashes
		}
	}
	if len(rest) == 0 {
		return Risk{}, false, nil
	}
	if gitSafe[rest[0]] || (len(rest) >= 2 && gitSafe[rest[0]+"/"+rest[1]]) {
		return Risk{}, false, nil
	}
	if len(rest) == 1 && (rest[0] == "config" || rest[0] == "config.worktree") {
		if c.Kind == Deleted || c.Mode.IsDir() {
			return Risk{}, false, nil
		}
		reasons, err := configRisk(project, c)
		if err != nil || len(reasons) == 0 {
			return Risk{}, false, err
		}
		return Risk{Rule: "git-config", Reason: strings.Join(reasons, "; ")}, true, nil
	}
	if c.Kind == Added && c.Mode.IsDir() {
		return Risk{}, false, nil // a directory alone runs nothing; its files are judged one by one
	}
	if rest[0] == "hooks" {
		return Risk{Rule: "git-hooks", Reason: "git runs hooks on commit, checkout, merge and push"}, true, nil
	}
	return Risk{Rule: "git-internal", Reason: "git reads this file; only objects, refs and logs are carried silently"}, true, nil
}

// readNew reads the agent's version of a changed file (bounded: config files are small).
func readNew(c Change) ([]byte, error) {
	if !c.Mode.IsRegular() {
		return nil, nil
	}
	f, err := os.OpenFile(c.src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 8<<20))
}

// readOld reads the project's version, or nothing when it has none.
func readOld(project string, c Change) []byte {
	if c.Kind != Modified {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(project, filepath.FromSlash(c.Path)), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 8<<20))
	return b
}

// configRisk lists the dangerous variables the agent's config has that the project's did not.
func configRisk(project string, c Change) ([]string, error) {
	nb, err := readNew(c)
	if err != nil {
		return nil, err
	}
	if c.Mode&fs.ModeSymlink != 0 {
		return []string{"config is a symlink: git would read a file the agent chose"}, nil
	}
	ne, err := parseGitConfig(nb)
	if err != nil {
		return []string{fmt.Sprintf("unparseable git config (%v): cannot tell what it runs", err)}, nil
	}
	had := map[string]bool{}
	if oe, err := parseGitConfig(readOld(project, c)); err == nil {
		for _, e := range oe {
			had[e.Key()+"\x00"+e.Value] = true
		}
	}
	var out []string
	for _, e := range ne {
		if had[e.Key()+"\x00"+e.Value] {
			continue
		}
		for _, r := range configRules {
			if r.match(e) {
				out = append(out, fmt.Sprintf("%s (line %d): %s", e.Key(), e.Line, r.reason))
				break
			}
		}
	}
	return out, nil
}

// attributesRisk lists the driver assignments the agent's .gitattributes has that the project's did not.
func attributesRisk(project string, c Change) ([]string, error) {
	if c.Mode&fs.ModeSymlink != 0 {
		return []string{"gitattributes is a symlink: git would read a file the agent chose"}, nil
	}
	nb, err := readNew(c)
	if err != nil {
		return nil, err
	}
	na, err := parseGitAttributes(nb)
	if err != nil {
		return []string{fmt.Sprintf("unparseable gitattributes (%v)", err)}, nil
	}
	had := map[gitAttr]bool{}
	if oa, err := parseGitAttributes(readOld(project, c)); err == nil {
		for _, a := range oa {
			a.Line = 0
			had[a] = true
		}
	}
	var out []string
	for _, a := range na {
		line := a.Line
		a.Line = 0
		if had[a] {
			continue
		}
		switch {
		case a.Name == "filter",
			a.Name == "diff" && !builtinDiff[a.Value],
			a.Name == "merge" && !builtinMerge[a.Value]:
			out = append(out, fmt.Sprintf("line %d: %s %s=%s selects a %s driver, which runs a program", line, a.Pattern, a.Name, a.Value, a.Name))
		}
	}
	return out, nil
}

// globMatch matches a slash path against a rule's glob (both lower case).
func globMatch(glob, p string) bool {
	return matchSegs(strings.Split(glob, "/"), strings.Split(p, "/"))
}

func matchSegs(g, p []string) bool {
	for len(g) > 0 {
		if g[0] == "**" {
			for i := 0; i <= len(p); i++ {
				if matchSegs(g[1:], p[i:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 {
			return false
		}
		if ok, _ := path.Match(g[0], p[0]); !ok {
			return false
		}
		g, p = g[1:], p[1:]
	}
	return len(p) == 0
}

// view answers "what is at this path in the agent's result": the run's change at the path, or the
// project's entry when the run did not touch it (and did not delete it or a parent).
type view struct {
	project string
	at      map[string]Change // the final (non-deleted) change per path
	deleted map[string]bool
}

func newView(project string, cs []Change) *view {
	v := &view{project: project, at: map[string]Change{}, deleted: map[string]bool{}}
	for _, c := range cs {
		if c.Kind == Deleted {
			v.deleted[c.Path] = true
		} else {
			v.at[c.Path] = c
		}
	}
	return v
}

// lookup returns the mode and, for a symlink, the target at rel in the result; ok is false when
// nothing is there.
func (v *view) lookup(rel string) (mode fs.FileMode, target string, ok bool) {
	if c, ok := v.at[rel]; ok {
		return c.Mode, c.Target, true
	}
	for p := rel; p != "."; p = slashDir(p) {
		if v.deleted[p] {
			if _, readded := v.at[p]; !readded {
				return 0, "", false
			}
		}
	}
	fi, err := projectLstat(v.project, rel)
	if err != nil {
		return 0, "", false
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ = os.Readlink(filepath.Join(v.project, filepath.FromSlash(rel)))
	}
	return fi.Mode(), target, true
}

// inside resolves the symlink at linkRel with target as the kernel would in the agent's result,
// following symlinks along the way, and says whether it stays in the project.
func (v *view) inside(linkRel, target string) (bool, string) {
	var stack []string // resolved components below the project root
	if d := slashDir(linkRel); d != "." {
		stack = strings.Split(d, "/")
	}
	todo := splitTarget(target)
	if strings.HasPrefix(target, "/") {
		rel, ok := relInside(v.project, target)
		if !ok {
			return false, "absolute path outside the project"
		}
		stack, todo = nil, splitTarget(rel)
	}
	for hops := 0; len(todo) > 0; {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return false, "climbs above the project root"
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, part)
		mode, t, ok := v.lookup(strings.Join(stack, "/"))
		if !ok || mode&fs.ModeSymlink == 0 {
			continue
		}
		if hops++; hops > 40 {
			return false, "too many levels of symlinks"
		}
		stack = stack[:len(stack)-1]
		if strings.HasPrefix(t, "/") {
			rel, ok := relInside(v.project, t)
			if !ok {
				return false, fmt.Sprintf("goes through %s, which points outside the project", strings.Join(append(stack, part), "/"))
			}
			stack = nil
			t = rel
		}
		todo = append(splitTarget(t), todo...)
	}
	return true, ""
}

func splitTarget(t string) []string { return strings.Split(t, "/") }

// relInside turns an absolute path into one relative to the project, if it starts inside. It is
// deliberately not cleaned: "/project/link/../x" must be resolved through link, not lexically.
func relInside(project, abs string) (string, bool) {
	if abs == project {
		return ".", true
	}
	if !strings.HasPrefix(abs, project+"/") {
		return "", false
	}
	return abs[len(project)+1:], true
}
