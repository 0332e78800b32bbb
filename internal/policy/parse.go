package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the policy file at path, after resolving symlinks so that Source names the file actually
// read, and parses it. It does not check where the file lives; see CheckOutside.
func Load(path string, opts Options) (*Policy, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	f, err := os.Open(resolved)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("policy file %s: not a regular file", resolved)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	return Parse(resolved, data, opts)
}

// Parse decodes and validates a policy. name is used in error messages and as the policy's Source.
// Every mistake is reported as an *Error, positioned when the YAML gives a position.
func Parse(name string, data []byte, opts Options) (*Policy, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("policy is larger than %d bytes", MaxFileSize)}
	}
	root, err := decodeYAML(name, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: name, home: opts.Home, workspace: opts.Workspace}
	if err := d.checkNodes(root); err != nil {
		return nil, err
	}
	p, err := d.policy(root)
	if err != nil {
		return nil, err
	}
	p.Source = name
	sum := sha256.Sum256(data)
	p.SourceSHA256 = hex.EncodeToString(sum[:])
	return p, nil
}

// decodeYAML parses exactly one YAML document into a node tree, refusing empty input and any further
// documents.
func decodeYAML(name string, data []byte) (root *yaml.Node, err error) {
	defer func() {
		// The YAML library is third-party code fed untrusted input: a panic there is a refusal here.
		if r := recover(); r != nil {
			root, err = nil, &Error{File: name, Msg: fmt.Sprintf("invalid YAML: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Line: 1, Column: 1, Msg: "empty policy (expected a mapping starting with version: 1)"}
		}
		return nil, syntaxError(name, data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, &Error{File: name, Line: next.Line, Column: next.Column, Msg: "only one YAML document is allowed"}
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(name, data, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{File: name, Line: 1, Column: 1, Msg: "empty policy (expected a mapping starting with version: 1)"}
	}
	return doc.Content[0], nil
}

// syntaxError turns go-yaml's "yaml: line N: problem" into an *Error on the line at fault.
func syntaxError(name string, data []byte, err error) error {
	if line, problem, ok := cutYAMLLine(err.Error()); ok {
		return &Error{File: name, Line: problemLine(data, line, problem), Msg: "invalid YAML: " + problem}
	}
	return &Error{File: name, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}

// cutYAMLLine splits go-yaml's syntax error message "yaml: line N: problem".
func cutYAMLLine(msg string) (line int, problem string, ok bool) {
	rest, ok := strings.CutPrefix(msg, "yaml: line ")
	if !ok {
		return 0, "", false
	}
	num, problem, ok := strings.Cut(rest, ": ")
	if !ok {
		return 0, "", false
	}
	line, err := strconv.Atoi(num)
	if err != nil || line <= 0 {
		return 0, "", false
	}
	return line, problem, true
}

// maxRescanBytes bounds the YAML problemLine re-parses in all, so that a large malformed file costs
// no more than a few milliseconds; past it the error keeps go-yaml's line.
const maxRescanBytes = 4 << 20

// problemLine finds the line a YAML syntax error is on. go-yaml reports a parser error ("did not find
// expected key", "did not find expected '-' indicator") at the start of the construct it was parsing,
// counted from 0: an indentation mistake deep in a section is reported on the line above the section,
// where there is nothing to fix. A document cut after any line is valid YAML up to there, except inside
// a multi-line flow collection or quoted string, whose cut fails with a problem of its own; so the first
// line after which the document fails with the same problem is the line at fault. reported is go-yaml's
// line, at or before it; it is returned when no line qualifies or the budget runs out.
func problemLine(data []byte, reported int, problem string) int {
	budget := maxRescanBytes
	line, end := 0, 0
	for end < len(data) {
		next := bytes.IndexByte(data[end:], '\n')
		if next < 0 {
			end = len(data)
		} else {
			end += next + 1
		}
		if line++; line < reported {
			continue
		}
		if budget -= end; budget < 0 {
			break
		}
		if _, p, ok := cutYAMLLine(yamlProblem(data[:end])); ok && p == problem {
			return line
		}
	}
	return reported
}

// yamlProblem returns go-yaml's error message for the documents in data, or "" when they parse.
func yamlProblem(data []byte) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return ""
			}
			return err.Error()
		}
	}
}

// decoder walks a YAML node tree into a Policy, so that every error can name the node's position and
// the field's path as the user wrote it. Each section of the file has a file of its own (filesystem.go,
// env.go, limits.go, sandbox.go, network.go, credentials.go) holding its types and the decoder method
// that maps the section's node onto them, so adding a section or a key is a local change; the checks
// of single values they share are in validate.go.
type decoder struct {
	file      string
	home      string
	workspace string // Options.Workspace
}

func (d *decoder) errf(n *yaml.Node, path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	return &Error{File: d.file, Line: n.Line, Column: n.Column, Msg: msg}
}

// checkNodes refuses anchors, aliases (the "billion laughs" expansion) and custom tags anywhere in the
// tree before anything is interpreted.
func (d *decoder) checkNodes(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return d.errf(n, "", "YAML anchors and aliases are not allowed in a policy")
	}
	if tag := n.ShortTag(); !strings.HasPrefix(tag, "!!") {
		return d.errf(n, "", "YAML tag %q is not allowed in a policy", tag)
	}
	for _, c := range n.Content {
		if err := d.checkNodes(c); err != nil {
			return err
		}
	}
	return nil
}

// field is one known key of a mapping and how to decode its value.
type field struct {
	name   string
	decode func(v *yaml.Node, path string) error
}

// mapping decodes a mapping with a fixed set of keys; unknown and duplicate keys are errors. It returns
// the value node of each key present, for the caller's required-field and cross-field checks.
func (d *decoder) mapping(n *yaml.Node, path string, fields ...field) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, d.errf(n, path, "expected a mapping, got %s", describe(n))
	}
	seen := make(map[string]*yaml.Node, len(fields))
	err := d.pairs(n, path, func(k, v *yaml.Node, p string) error {
		for _, f := range fields {
			if f.name == k.Value {
				seen[f.name] = v
				return f.decode(v, p)
			}
		}
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.name
		}
		return d.errf(k, p, "unknown field (expected one of %s)", strings.Join(names, ", "))
	})
	return seen, err
}

// pairs walks a mapping's key/value pairs, refusing non-string and duplicate keys.
func (d *decoder) pairs(n *yaml.Node, path string, fn func(k, v *yaml.Node, path string) error) error {
	if n.Kind != yaml.MappingNode {
		return d.errf(n, path, "expected a mapping, got %s", describe(n))
	}
	first := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			return d.errf(k, path, "YAML merge keys (<<) are not allowed in a policy")
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return d.errf(k, path, "expected a string key, got %s", describe(k))
		}
		p := join(path, k.Value)
		if line, dup := first[k.Value]; dup {
			return d.errf(k, p, "duplicate key (first at line %d)", line)
		}
		first[k.Value] = k.Line
		if err := fn(k, v, p); err != nil {
			return err
		}
	}
	return nil
}

// list decodes a sequence element by element.
func (d *decoder) list(n *yaml.Node, path string, fn func(v *yaml.Node, path string) error) error {
	if n.Kind != yaml.SequenceNode {
		return d.errf(n, path, "expected a list, got %s", describe(n))
	}
	for i, v := range n.Content {
		if err := fn(v, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) str(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", d.errf(n, path, "expected a string, got %s", describe(n))
	}
	if strings.ContainsRune(n.Value, 0) {
		return "", d.errf(n, path, "must not contain a NUL byte")
	}
	return n.Value, nil
}

// strs decodes a list of strings, each checked by check (which may rewrite it), refusing duplicates
// after rewriting.
func (d *decoder) strs(n *yaml.Node, path string, check func(s string) (string, error)) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	err := d.list(n, path, func(v *yaml.Node, p string) error {
		s, err := d.str(v, p)
		if err != nil {
			return err
		}
		if check != nil {
			if s, err = check(s); err != nil {
				return d.errf(v, p, "%v", err)
			}
		}
		if seen[s] {
			return d.errf(v, p, "%q is listed twice", s)
		}
		seen[s] = true
		out = append(out, s)
		return nil
	})
	return out, err
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		return false, d.errf(n, path, "expected true or false, got %s", describe(n))
	}
	return b, nil
}

// integer decodes a whole number in [lo, hi].
func (d *decoder) integer(n *yaml.Node, path string, lo, hi int64) (int64, error) {
	var i int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
		return 0, d.errf(n, path, "expected an integer, got %s", describe(n))
	}
	if i < lo || i > hi {
		if hi == math.MaxInt64 {
			return 0, d.errf(n, path, "%d is out of range (expected at least %d)", i, lo)
		}
		return 0, d.errf(n, path, "%d is out of range (expected %d to %d)", i, lo, hi)
	}
	return i, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names a node's value for an error message without leaking Go type names.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing (null)"
		}
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return strconv.Quote(v)
	}
	return "an unsupported YAML node"
}

// host decodes a string and checks it as a host (pattern).
func (d *decoder) host(n *yaml.Node, path string, check func(string) (string, error)) (string, error) {
	s, err := d.str(n, path)
	if err != nil {
		return "", err
	}
	h, err := check(s)
	if err != nil {
		return "", d.errf(n, path, "%v", err)
	}
	return h, nil
}

// path decodes an absolute or ~-relative host path.
func (d *decoder) path(n *yaml.Node, path string) (string, error) {
	s, err := d.str(n, path)
	if err != nil {
		return "", err
	}
	p, err := expandPath(s, d.home)
	if err != nil {
		return "", d.errf(n, path, "%v", err)
	}
	return p, nil
}

// require reports the first of names missing from seen, at the mapping n.
func (d *decoder) require(n *yaml.Node, path string, seen map[string]*yaml.Node, names ...string) error {
	for _, name := range names {
		if seen[name] == nil {
			return d.errf(n, path, "%s is required", name)
		}
	}
	return nil
}

// valueOf returns the value of key in mapping n, or nil.
func valueOf(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
