package scan

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// DefaultMaxRead is how much of each file the content rules read when Options.MaxRead is zero: secrets
// sit in small configuration files, and reading only the start of large ones keeps cordon's start fast.
const DefaultMaxRead = 64 << 10

// maxMaxRead bounds Options.MaxRead.
const maxMaxRead = 16 << 20

// maxPerFile bounds the content findings kept for one file, so a file full of keys cannot make the
// report (or memory) large; one finding is enough to mask it.
const maxPerFile = 20

// Finding is one secret-shaped thing: a file of the workspace (Path) or a variable (Env). It never holds
// the secret itself. Path is the file's exact name, which may hold any byte but '/' and NUL: print
// findings with String or Summary, which escape what a terminal would act on.
type Finding struct {
	// Path is the file, slash-separated and relative to the scanned root; empty for a variable.
	Path string
	// Env is the variable's name; empty for a file.
	Env string
	// Line is the 1-based line of a content match; 0 when the name (or the file as a whole) decided.
	Line int
	// Kind says what was found, for a person: "GitHub token", "database URL to db.prod.example".
	Kind string
	// Preview is a redacted hint for recognising the secret (a token's public prefix and "…"), or empty.
	Preview string
}

// String renders the finding on one line for the user: where, what, and the redacted preview.
func (f Finding) String() string {
	var b strings.Builder
	if f.Env != "" {
		b.WriteString("$" + display(f.Env))
	} else {
		b.WriteString(display(f.Path))
	}
	if f.Line > 0 {
		b.WriteString(":" + strconv.Itoa(f.Line))
	}
	b.WriteString(": " + display(f.Kind))
	if f.Preview != "" {
		b.WriteString(" (" + display(f.Preview) + ")")
	}
	return b.String()
}

// display returns s as it may be printed to a terminal: unchanged when it is printable, quoted with
// escapes otherwise. File names and URLs come from the workspace, and a name holding an escape
// sequence must not drive the user's terminal.
func display(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// Options tune ScanTree. The zero value scans everything but the default skip list, reading
// DefaultMaxRead bytes of each file.
type Options struct {
	// Skip are globs (filesystem.deny syntax: see policy.DenyMatcher) of paths not to scan at all, in
	// addition to DefaultSkip.
	Skip []string
	// NoDefaultSkip scans the trees DefaultSkip lists (node_modules, .git internals, ...).
	NoDefaultSkip bool
	// Allow are globs of paths the user allowed (policy): nothing under them is reported.
	Allow []string
	// ConfigOnly reads only files whose names mark configuration, keys or environment (dotfiles,
	// *.json, *.yaml, *.toml, *.ini, *.conf, *.properties, *.xml, *.pem, *.key, *.tfvars, .env*, ...);
	// the name rules still apply to every file. It is for trees too large to read at start: a token
	// pasted into source code is then not found.
	ConfigOnly bool
	// MaxRead is how many bytes from the start of each file the content rules read; 0 means
	// DefaultMaxRead, and it is at most 16 MiB (each worker holds a buffer this large). What lies
	// beyond is not scanned; the name rules apply whatever the size.
	MaxRead int64
	// Cache, when set, lets the scan skip files that were clean and have not changed since the scan
	// that last used it; the scan updates it. See Cache.
	Cache *Cache
	// Workers is how many files and directories are read at once; 0 means twice GOMAXPROCS, since
	// the work waits on the disk as much as on the CPU.
	Workers int
}

// DefaultSkip returns the directories ScanTree does not enter, at any depth, unless
// Options.NoDefaultSkip is set: version control internals (but .git/config is read: a remote URL may
// hold a token), dependency and cache trees. Go and Composer vendor trees are skipped too, recognised by
// their content (vendor/modules.txt, vendor/autoload.php) rather than by name.
func DefaultSkip() []string {
	var names []string
	for name := range defaultSkipDirs {
		names = append(names, name+"/")
	}
	slices.Sort(names)
	return names
}

// defaultSkipDirs are the names DefaultSkip lists.
var defaultSkipDirs = map[string]bool{
	".git": true, ".hg": true, ".svn": true, "node_modules": true, "__pycache__": true, ".venv": true,
	".tox": true, ".nox": true, ".mypy_cache": true, ".pytest_cache": true, ".ruff_cache": true,
	".terraform": true, ".gradle": true,
}

// ScanTree scans the directory tree at root and returns its findings sorted by path, line and kind, so
// the same tree always gives the same report. Files that cannot be read are reported as findings
// (fail closed: what was not checked is masked like what was found); only a root that cannot be read,
// a bad glob, or ctx ending is an error.
func ScanTree(ctx context.Context, root string, opt Options) ([]Finding, error) {
	skip, err := policy.CompileDeny(opt.Skip)
	if err != nil {
		return nil, fmt.Errorf("scan skip list: %w", err)
	}
	allow, err := policy.CompileDeny(opt.Allow)
	if err != nil {
		return nil, fmt.Errorf("scan allow list: %w", err)
	}
	maxRead := opt.MaxRead
	if maxRead <= 0 {
		maxRead = DefaultMaxRead
	}
	maxRead = min(maxRead, maxMaxRead)
	w := &walker{
		root:        root,
		skip:        skip,
		allow:       allow,
		defaultSkip: !opt.NoDefaultSkip,
		configOnly:  opt.ConfigOnly,
		maxRead:     maxRead,
		cache:       opt.Cache,
	}
	if opt.Cache != nil {
		opt.Cache.begin(cacheKey(opt, maxRead))
	}
	found, err := w.run(ctx, opt.Workers)
	if err != nil {
		return nil, err
	}
	sortFindings(found)
	return slices.Compact(found), nil
}

// cacheKey names the rules and the options a scan's cache records depend on: which directories are
// walked, which files are read, and how much of each.
func cacheKey(opt Options, maxRead int64) string {
	key := rulesVersion + " maxread=" + strconv.FormatInt(maxRead, 10)
	if opt.NoDefaultSkip {
		key += " no-default-skip"
	}
	if opt.ConfigOnly {
		key += " config-only"
	}
	for _, g := range opt.Skip {
		key += " skip=" + strconv.Quote(g)
	}
	for _, g := range opt.Allow {
		key += " allow=" + strconv.Quote(g)
	}
	return key
}

// Paths returns the distinct file paths of the findings, sorted: what to mask.
func Paths(findings []Finding) []string {
	var paths []string
	for _, f := range findings {
		if f.Path != "" {
			paths = append(paths, f.Path)
		}
	}
	slices.Sort(paths)
	return slices.Compact(paths)
}

func sortFindings(fs []Finding) {
	slices.SortFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Env, b.Env),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Preview, b.Preview),
		)
	})
}

// summaryPaths is how many paths Summary names before counting the rest.
const summaryPaths = 3

// Summary is the one line that tells the user what was masked and how to share a file anyway, such as
// `masked 4 secret-shaped files from the agent: .env, config/db.yml, keys/id_rsa and 1 more, all in
// RUN/masked-secrets.txt (allow one with filesystem.allow_secrets in the policy)`; allowHint says where
// the user allows paths, and listed, if not empty, where Listing's full account was written (named when
// the line counts files it does not name). It is empty when nothing was masked.
func Summary(findings []Finding, allowHint, listed string) string {
	paths := Paths(findings)
	if len(paths) == 0 {
		return ""
	}
	noun := "files"
	if len(paths) == 1 {
		noun = "file"
	}
	var named []string
	for _, p := range paths[:min(len(paths), summaryPaths)] {
		named = append(named, display(p))
	}
	s := fmt.Sprintf("masked %d secret-shaped %s from the agent: %s", len(paths), noun, strings.Join(named, ", "))
	if rest := len(paths) - len(named); rest > 0 {
		s += fmt.Sprintf(" and %d more", rest)
		if listed != "" {
			s += ", all in " + display(listed)
		}
	}
	if allowHint != "" {
		s += " (allow one with " + allowHint + ")"
	}
	return s
}

// Listing is the full account of findings that Summary abbreviates, one per line as Finding.String
// renders it (path:line: kind (redacted preview)), for the run's record: it never holds a secret.
func Listing(findings []Finding) []byte {
	var b strings.Builder
	for _, f := range findings {
		b.WriteString(f.String() + "\n")
	}
	return []byte(b.String())
}
