package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// mod is cordon's module path; rules below name packages relative to it with m().
const mod = "github.com/cordon-sandbox/cordon"

// m names a package of the module: m("internal/policy/...") is the policy package and those below it,
// m("") the module's root package (the public API) alone.
func m(rel string) string {
	if rel == "" {
		return mod
	}
	return mod + "/" + rel
}

// A rule forbids the packages matching From to import, directly or through anything else, a package
// matching any of Forbid. Patterns are import paths; a trailing "/..." matches the path and every
// path below it, as for the go command.
type rule struct {
	From string
	// Except are packages matching From that the rule leaves out, each for a reason given in Why.
	Except []string
	Forbid []string
	Why    string
}

// rules are the directions cordon's dependencies must not take. Each one says why: a reviewer
// deciding whether to bend one should know what it protects.
var rules = []rule{
	{
		From:   m("internal/policy/..."),
		Forbid: []string{m("internal/egress/...")},
		Why:    "policy is data: the gateway reads the rules, the rules know nothing of the gateway (egress.Decision is policy.Decision, not the other way round)",
	},
	{
		From:   m("internal/policy/..."),
		Forbid: []string{m("internal/sandbox/..."), m("internal/creds/..."), m("internal/workspace/..."), m("internal/runstate/..."), m("internal/presets/...")},
		Why:    "policy is data: what carries a run out reads the policy, never the reverse (presets reach it through the PresetSource interface)",
	},
	{
		From:   m("internal/policy/..."),
		Forbid: []string{"golang.org/x/sys/unix"},
		Why:    "policy is data: it loads and validates on every platform, the ones without a sandbox backend included (cordon policy check on a laptop)",
	},
	{
		From:   m("internal/sandbox/..."),
		Forbid: []string{m("internal/egress/...")},
		Why:    "the box does not know the gateway: it makes the gateway's sockets and traffic rules inside, the gateway serves them from outside as plain listeners (sandbox.Listeners)",
	},
	{
		From:   m("internal/sandbox/..."),
		Forbid: []string{m("internal/policy/...")},
		Why:    "the backend contract is declarative: the run translates the policy into a Spec, so that no box interprets policy on its own",
	},
	{
		From:   m("internal/sandbox/..."),
		Forbid: []string{m("internal/creds/...")},
		Why:    "a box never holds a real credential: the sandbox sees placeholders only, which the gateway swaps outside",
	},
	{
		From:   m("internal/egress/..."),
		Forbid: []string{m("internal/sandbox/linux/...")},
		Why:    "the gateway serves plain listeners from any backend (gVisor and Kubernetes come next); the box's Linux specifics stay in the box",
	},
	{
		From:   m("internal/egress/..."),
		Forbid: []string{m("internal/creds/...")},
		Why:    "credentials reach the gateway only as the functions the run hands it (gateway.Config.Modify and Redactions), so the gateway cannot reach a credential source by itself",
	},
	{
		From:   m("internal/redact"),
		Forbid: []string{m("...")},
		Why:    "a leaf: the gateway and the credentials both put values back to placeholders with it, and would both inherit whatever it imported",
	},
	{
		From:   m("internal/hostname"),
		Forbid: []string{m("...")},
		Why:    "a leaf: the one definition of a valid host name for the policy, DNS, TLS SNI and HTTP, which all import it",
	},
	{
		From:   m("internal/budget"),
		Forbid: []string{m("internal/egress/..."), m("internal/policy/..."), m("internal/sandbox/..."), m("internal/creds/...")},
		Why:    "spend metering is arithmetic over the APIs' wire formats: the interceptor and the library use it, it knows neither",
	},
	{
		From:   m("internal/origdst"),
		Forbid: []string{m("...")},
		Why:    "a leaf: reading a redirected connection's original destination, shared by the gateway and the redirect rules' tests",
	},
	{
		From:   m("internal/httpoverride"),
		Forbid: []string{m("...")},
		Why:    "a leaf: the one list of method-override headers, shared by the policy (data) and the gateway's checks",
	},
	{
		From:   m("internal/udiff"),
		Forbid: []string{m("...")},
		Why:    "a leaf: a unified diff of two texts, for any file cordon proposes to change",
	},
	{
		From:   m("internal/suggest"),
		Forbid: []string{m("internal/egress/..."), m("internal/sandbox/..."), m("internal/creds/..."), m("internal/runstate/..."), m("internal/workspace/...")},
		Why:    "a suggestion is text made from a finished log and a file: it reads no run state and touches no gateway, so nothing in it can widen a policy while an agent runs",
	},
	{
		From:   m("internal/policyimport"),
		Forbid: []string{m("internal/egress/..."), m("internal/sandbox/..."), m("internal/creds/..."), m("internal/runstate/..."), m("internal/workspace/...")},
		Why:    "an import translates one settings file into policy text, nothing more",
	},
	{
		From:   m("internal/gitref"),
		Forbid: []string{m("...")},
		Why:    "a leaf: the one reading of git's ref-name syntax, shared by the policy (branch globs) and the gateway (pushed refs)",
	},
	{
		From:   m("internal/egress/gitpush"),
		Forbid: []string{m("internal/policy/..."), m("internal/egress/intercept/..."), m("internal/audit/...")},
		Why:    "the push parser is protocol only: the interceptor hands it bodies and rules as plain values, so it can be fuzzed and reused alone",
	},
	{
		From:   m("..."),
		Forbid: []string{m("cmd/..."), m("bench/...")},
		Why:    "the CLI and the benchmarks are clients: the run is the library (package cordon), and nothing is built on a main package",
	},
	{
		From:   m("internal/..."),
		Except: []string{m("internal/verify")},
		Forbid: []string{m("")},
		Why: "the public API sits on top of the internal packages; one importing it would turn the layering into a cycle " +
			"(internal/verify is a client of the API, as the CLI is: cordon verify runs its probes in a sandbox through it)",
	},
	{
		From:   m("..."),
		Forbid: []string{"net/http/pprof", "expvar"},
		Why:    "debug endpoints would hand the run's state, credentials included, to whatever can reach them",
	},
}

// An exception is a forbidden import that is known and has an issue to remove it. The test fails
// when one is no longer needed, so the list only shrinks.
type exception struct {
	From, Import string
	TODO         string
}

// exceptions are the violations still in the tree; each names the issue that removes it.
var exceptions = []exception{}

// pkg is what the test needs of `go list -json` for one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
	Module     *struct {
		Path, Version string
		Main          bool
		Replace       *struct{ Path, Version string }
	}
	Error *struct{ Err string }
}

// goList runs `go list` for GOOS=goos with the arguments and decodes its stream of JSON objects. It
// never touches the network: what the build needs is in the module cache already.
func goList(t *testing.T, goos string, args ...string) []pkg {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the imports: %v", err)
	}
	cmd := exec.Command(goTool, append([]string{"list", "-e"}, args...)...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0", "GOPROXY=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s (GOOS=%s): %v\n%s", strings.Join(args, " "), goos, err, stderr.Bytes())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

// match reports whether path matches an import path pattern (see rule).
func match(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// violation is one forbidden import reached, with the chain of imports that reaches it.
type violation struct {
	rule  *rule
	chain []string // from the package to the forbidden import
}

func (v violation) from() string   { return v.chain[0] }
func (v violation) target() string { return v.chain[len(v.chain)-1] }

// check returns every violation of rules in the import graph, the shortest chain for each package and
// forbidden import. graph maps an import path to its direct imports; only packages of the module are
// checked as importers.
func check(graph map[string][]string, rules []rule) []violation {
	var out []violation
	var froms []string
	for p := range graph {
		if match(m("..."), p) {
			froms = append(froms, p)
		}
	}
	slices.Sort(froms)
	for _, from := range froms {
		parent := reach(graph, from)
		var reached []string
		for p := range parent {
			reached = append(reached, p)
		}
		slices.Sort(reached)
		for i := range rules {
			r := &rules[i]
			if !match(r.From, from) || slices.ContainsFunc(r.Except, func(e string) bool { return match(e, from) }) {
				continue
			}
			for _, to := range reached {
				if to == from || !slices.ContainsFunc(r.Forbid, func(f string) bool { return match(f, to) }) {
					continue
				}
				var chain []string
				for p := to; p != ""; p = parent[p] {
					chain = append(chain, p)
				}
				slices.Reverse(chain)
				out = append(out, violation{rule: r, chain: chain})
			}
		}
	}
	return out
}

// reach walks the imports from root breadth first; it returns every package reached, each with the
// package it was first reached from (root's is "").
func reach(graph map[string][]string, root string) map[string]string {
	parent := map[string]string{root: ""}
	for queue := []string{root}; len(queue) > 0; queue = queue[1:] {
		for _, imp := range graph[queue[0]] {
			if _, seen := parent[imp]; !seen {
				parent[imp] = queue[0]
				queue = append(queue, imp)
			}
		}
	}
	return parent
}

// judge splits the violations into those the exceptions allow and the rest, and names the exceptions
// that no longer match anything.
func judge(vs []violation, exceptions []exception) (failures []violation, stale []exception) {
	used := make([]bool, len(exceptions))
	for _, v := range vs {
		i := slices.IndexFunc(exceptions, func(e exception) bool { return e.From == v.from() && e.Import == v.target() })
		if i < 0 {
			failures = append(failures, v)
			continue
		}
		used[i] = true
	}
	for i, e := range exceptions {
		if !used[i] {
			stale = append(stale, e)
		}
	}
	return failures, stale
}

// TestImportDirections: no package of cordon reaches an import its rules forbid, on Linux (where the
// sandbox is) or on macOS (where only the rest builds today).
func TestImportDirections(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		t.Run(goos, func(t *testing.T) {
			pkgs := goList(t, goos, "-deps", "-json=ImportPath,Imports,Error", m("..."))
			graph := make(map[string][]string, len(pkgs))
			for _, p := range pkgs {
				// A package for another platform only (the Linux sandbox, listed for darwin) has no
				// files here, hence no imports: that is not an error.
				if p.Error != nil && match(m("..."), p.ImportPath) && !strings.Contains(p.Error.Err, "build constraints exclude all Go files") {
					t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
				}
				graph[p.ImportPath] = p.Imports
			}
			if _, ok := graph[m("internal/policy")]; !ok {
				t.Fatalf("go list did not list %s: the test is not looking at cordon", m("internal/policy"))
			}
			failures, stale := judge(check(graph, rules), exceptions)
			for _, v := range failures {
				t.Errorf("%s must not import %s: %s\n\timport chain: %s", v.from(), v.target(), v.rule.Why, strings.Join(v.chain, " -> "))
			}
			if goos == "linux" { // the exceptions are the Linux build's; darwin's may have fewer
				for _, e := range stale {
					t.Errorf("exception no longer needed, remove it from exceptions: %s -> %s (%s)", e.From, e.Import, e.TODO)
				}
			}
		})
	}
}

// TestCheckFindsForbiddenImports: the checker catches a forbidden import however far down the chain
// it is, names the chain, leaves allowed directions alone, and honours (and reports unused) exceptions.
func TestCheckFindsForbiddenImports(t *testing.T) {
	graph := map[string][]string{
		m("internal/policy"):           {"fmt", m("internal/policy/helper")},
		m("internal/policy/helper"):    {m("internal/egress")},
		m("internal/egress"):           {"net/netip"},
		m("internal/egress/gateway"):   {m("internal/egress"), m("internal/policy"), m("internal/sandbox")},
		m("internal/sandbox"):          {"os"},
		m("internal/sandbox/linux"):    {m("internal/sandbox")},
		m("internal/hostname"):         {"errors"},
		m("cmd/cordon"):                {m("internal/egress/gateway")},
		"fmt":                          nil,
		"net/netip":                    nil,
		"os":                           nil,
		"errors":                       nil,
		m("internal/redact"):           {m("internal/hostname")},
		m("internal/workspace"):        {m("cmd/cordon")},
		m("internal/policy/unrelated"): nil,
	}
	vs := check(graph, rules)
	var got []string
	for _, v := range vs {
		got = append(got, strings.Join(v.chain, " -> "))
	}
	want := []string{
		// cmd/cordon reaches policy -> egress: the importer is reported, not its clients.
		strings.Join([]string{m("internal/policy"), m("internal/policy/helper"), m("internal/egress")}, " -> "),
		strings.Join([]string{m("internal/policy/helper"), m("internal/egress")}, " -> "),
		strings.Join([]string{m("internal/redact"), m("internal/hostname")}, " -> "),
		strings.Join([]string{m("internal/workspace"), m("cmd/cordon")}, " -> "),
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	failures, stale := judge(vs, []exception{
		{From: m("internal/redact"), Import: m("internal/hostname"), TODO: "issue 0"},
		{From: m("internal/sandbox"), Import: m("internal/egress"), TODO: "issue 0"},
	})
	if len(failures) != 3 || len(stale) != 1 || stale[0].From != m("internal/sandbox") {
		t.Errorf("judge: %d failures, stale %v; want 3 failures and the sandbox exception stale", len(failures), stale)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/modules.txt with the modules the cordon binary links today")

// modulesFile is the reviewed list of third-party modules in the cordon binary.
const modulesFile = "testdata/modules.txt"

const modulesHeader = `# The third-party modules linked into the cordon binary (GOOS=linux, CGO_ENABLED=0), one
# "path version" a line. cordon is a security tool: a change here is a new dependency (or a new
# version of one) that someone must review. Regenerate after reviewing with
#	go test ./internal/deptest -update
`

// TestBinaryModules: the modules the cordon binary links are the reviewed ones in testdata.
func TestBinaryModules(t *testing.T) {
	var lines []string
	for _, p := range goList(t, "linux", "-deps", "-json=ImportPath,Standard,Module,Error", m("cmd/cordon")) {
		if p.Error != nil {
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		if p.Standard || p.Module == nil || p.Module.Main {
			continue
		}
		line := p.Module.Path + " " + p.Module.Version
		if r := p.Module.Replace; r != nil {
			line += " => " + strings.TrimSpace(r.Path+" "+r.Version)
		}
		if !slices.Contains(lines, line) {
			lines = append(lines, line)
		}
	}
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.WriteFile(modulesFile, []byte(modulesHeader+got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(modulesFile)
	if err != nil {
		t.Fatalf("%v (create it with: go test ./internal/deptest -update)", err)
	}
	var want []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	if added, removed := diff(want, lines); len(added)+len(removed) > 0 {
		var msg strings.Builder
		for _, l := range added {
			fmt.Fprintf(&msg, "\n\t+ %s", l)
		}
		for _, l := range removed {
			fmt.Fprintf(&msg, "\n\t- %s", l)
		}
		t.Errorf("the cordon binary's third-party modules differ from %s:%s\nreview the change, then record it with: go test ./internal/deptest -update", modulesFile, msg.String())
	}
}

// diff returns what is in got and not in want, and the reverse.
func diff(want, got []string) (added, removed []string) {
	for _, l := range got {
		if !slices.Contains(want, l) {
			added = append(added, l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			removed = append(removed, l)
		}
	}
	return added, removed
}
