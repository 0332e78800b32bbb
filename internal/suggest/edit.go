package suggest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// The edit is made in the file's text, not by re-encoding its YAML: yaml.v3 re-encodes a document
// with its own indentation and without blank lines, which would turn a two-line addition into a
// rewrite of the whole file. The node tree only says where things are (every node has its line and
// column); new lines are spliced in there, in the file's own indentation, each with a comment saying
// what it opens. The result is parsed again and checked to allow what it was meant to (Check).

// ErrCannotEdit is wrapped when the file's layout leaves no place for an addition that the edit can
// make without rewriting the user's lines (a flow collection over several lines, say).
var ErrCannotEdit = errors.New("cannot place the addition in this layout")

// DefaultText is the file that Edit is given for a run that had the built-in default policy: what
// the edit adds to it is the whole file to create.
const DefaultText = "version: 1\n"

// Edit returns src (a policy file's text, name used in errors) with the plan's additions spliced in.
func Edit(name string, src []byte, plan Plan) ([]byte, error) {
	e, err := newEditor(name, src)
	if err != nil {
		return nil, err
	}
	if err := e.allow(plan.Allow); err != nil {
		return nil, err
	}
	if err := e.http(plan.HTTP); err != nil {
		return nil, err
	}
	return e.apply(), nil
}

// textEdit is one splice: text inserted at (line, col), replacing del bytes, or whole lines inserted
// after line (col < 0).
type textEdit struct {
	line, col, del int
	text           string
	lines          []string
	order          int
}

type editor struct {
	name     string
	lines    []string
	finalNL  bool
	eol      string // "\n", or "\r\n" for a file written with those
	root     *yaml.Node
	indent   int
	edits    []textEdit
	commentd map[int]bool // lines that already got a comment appended
}

func newEditor(name string, src []byte) (e *editor, err error) {
	defer func() {
		// As in the policy's own parser: a panic of the YAML library on a strange file is a refusal.
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("%s: invalid YAML: %v", name, r)
		}
	}()
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not a policy (a mapping at the top)", name)
	}
	text := string(src)
	e = &editor{name: name, finalNL: strings.HasSuffix(text, "\n"), root: doc.Content[0], indent: 2, commentd: map[int]bool{}, eol: "\n"}
	if strings.Contains(text, "\r\n") {
		e.eol = "\r\n"
	}
	e.lines = strings.Split(strings.TrimSuffix(strings.TrimSuffix(text, "\n"), "\r"), "\n")
	for i, l := range e.lines {
		e.lines[i] = strings.TrimSuffix(l, "\r")
	}
	e.indent = detectIndent(e.root)
	return e, nil
}

// detectIndent is the file's indentation step: how far the first nested block mapping sits from its
// key (2 when the file has none).
func detectIndent(root *yaml.Node) int {
	for i := 1; i < len(root.Content); i += 2 {
		k, v := root.Content[i-1], root.Content[i]
		if v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0 && v.Content[0].Column > k.Column {
			return v.Content[0].Column - k.Column
		}
	}
	return 2
}

func (e *editor) add(t textEdit) {
	t.order = len(e.edits)
	e.edits = append(e.edits, t)
}

// apply makes the splices from the end of the file to its start, so that positions stay true.
func (e *editor) apply() []byte {
	edits := slices.Clone(e.edits)
	slices.SortStableFunc(edits, func(a, b textEdit) int {
		if a.line != b.line {
			return b.line - a.line
		}
		ac, bc := a.col, b.col
		if ac < 0 {
			ac = 1 << 30
		}
		if bc < 0 {
			bc = 1 << 30
		}
		if ac != bc {
			return bc - ac
		}
		return b.order - a.order
	})
	lines := slices.Clone(e.lines)
	for _, t := range edits {
		if t.col < 0 {
			lines = slices.Insert(lines, t.line+1, t.lines...)
			continue
		}
		l := lines[t.line]
		lines[t.line] = l[:t.col] + t.text + l[t.col+t.del:]
	}
	out := strings.Join(lines, e.eol)
	if e.finalNL || len(edits) > 0 {
		out += e.eol
	}
	return []byte(out)
}

// get returns the value of key in the mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	for i := 1; i < len(m.Content); i += 2 {
		if m.Content[i-1].Value == key {
			return m.Content[i]
		}
	}
	return nil
}

func lastLine(n *yaml.Node) int {
	l := n.Line
	for _, c := range n.Content {
		l = max(l, lastLine(c))
	}
	return l
}

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// blockEnd is the index of the last line that belongs to the block node n, whose entries start at
// column base (0-based): its last descendant's line, then every following line indented deeper
// (continuations, deeper comments), blank lines between them included.
func (e *editor) blockEnd(n *yaml.Node, base int) int {
	end := lastLine(n) - 1
	for j := end + 1; j < len(e.lines); j++ {
		if strings.TrimSpace(e.lines[j]) == "" {
			continue
		}
		if indentOf(e.lines[j]) <= base {
			break
		}
		end = j
	}
	return end
}

// closing is the index of the bracket that closes the flow collection opened at line[open], or -1.
func closing(line string, open int) int {
	depth := 0
	for i := open; i < len(line); i++ {
		switch c := line[i]; c {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				return i
			}
		case '"', '\'':
			if quoteStarts(line, i) {
				i = quotedEnd(line, i)
			}
		case '#':
			if i > 0 && (line[i-1] == ' ' || line[i-1] == '\t') {
				return -1
			}
		}
	}
	return -1
}

// quoteStarts says whether the quote at line[i] opens a quoted scalar (and is not inside a plain one).
func quoteStarts(line string, i int) bool {
	return i == 0 || strings.IndexByte(" \t[{,:", line[i-1]) >= 0
}

// quotedEnd is the index of the quote closing the scalar quoted at line[i] ("..." with backslash
// escapes, '...' with ” for a quote), or len(line).
func quotedEnd(line string, i int) int {
	q := line[i]
	for j := i + 1; j < len(line); j++ {
		switch {
		case q == '"' && line[j] == '\\':
			j++
		case line[j] == q && q == '\'' && j+1 < len(line) && line[j+1] == '\'':
			j++
		case line[j] == q:
			return j
		}
	}
	return len(line)
}

// flowClose is the position of the bracket closing the flow collection n, which must be written on
// one line.
func (e *editor) flowClose(n *yaml.Node) (line, col int, err error) {
	line = n.Line - 1
	if lastLine(n) != n.Line {
		return 0, 0, fmt.Errorf("%s:%d: %w (a flow collection over several lines)", e.name, n.Line, ErrCannotEdit)
	}
	col = closing(e.lines[line], n.Column-1)
	if col < 0 {
		return 0, 0, fmt.Errorf("%s:%d: %w (its closing bracket is not on the line)", e.name, n.Line, ErrCannotEdit)
	}
	return line, col, nil
}

// hasComment says whether the line already ends in a comment.
func hasComment(line string) bool {
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '#':
			if i == 0 || line[i-1] == ' ' || line[i-1] == '\t' {
				return true
			}
		case '"', '\'':
			if quoteStarts(line, i) {
				i = quotedEnd(line, i)
			}
		}
	}
	return false
}

// comment says what an edit on line opens: at the line's end, or on a line of its own above it when
// the line has a comment of the user's already.
func (e *editor) comment(line int, text string) {
	l := e.lines[line]
	if !hasComment(l) && !e.commentd[line] {
		e.commentd[line] = true
		e.add(textEdit{line: line, col: len(l), text: "  # " + commentText(text)})
		return
	}
	e.add(textEdit{line: line - 1, col: -1, lines: []string{strings.Repeat(" ", indentOf(l)) + "# " + commentText(text)}})
}

// item is one entry to append to a sequence: its YAML text (one line) and its comment.
type item struct{ text, comment string }

// commentText is s made safe to end a line with: what the agent sent (a path, a name) is quoted in
// comments, and a line break there would start a line of YAML of the agent's choosing.
func commentText(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError {
			return '?'
		}
		if r < 0x20 || r == 0x7f || r == '\u2028' || r == '\u2029' || r == '\u0085' {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// appendSeq appends items to the sequence seq, in its style.
func (e *editor) appendSeq(seq *yaml.Node, items []item) error {
	if seq.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s:%d: %w (expected a list)", e.name, seq.Line, ErrCannotEdit)
	}
	if seq.Style&yaml.FlowStyle == 0 {
		dash := seq.Column - 1
		var lines []string
		for _, it := range items {
			lines = append(lines, strings.Repeat(" ", dash)+"- "+it.text+"  # "+commentText(it.comment))
		}
		e.add(textEdit{line: e.blockEnd(seq, dash), col: -1, lines: lines})
		return nil
	}
	line, col, err := e.flowClose(seq)
	if err != nil {
		return err
	}
	var texts, comments []string
	for _, it := range items {
		texts, comments = append(texts, it.text), append(comments, it.text+": "+it.comment)
	}
	sep := ", "
	if len(seq.Content) == 0 {
		sep = ""
	}
	e.add(textEdit{line: line, col: col, text: sep + strings.Join(texts, ", ")})
	for _, c := range comments {
		e.comment(line, c)
	}
	return nil
}

// addKey adds key to the mapping m: with a one-line value (inline, commented) or a block of lines
// (block, indented one step below the key, each already commented where it adds something).
func (e *editor) addKey(m *yaml.Node, key, inline, comment string, block []string) error {
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: %w (expected a mapping)", e.name, m.Line, ErrCannotEdit)
	}
	if m.Style&yaml.FlowStyle != 0 {
		if inline == "" {
			return fmt.Errorf("%s:%d: %w (a block inside a flow mapping)", e.name, m.Line, ErrCannotEdit)
		}
		line, col, err := e.flowClose(m)
		if err != nil {
			return err
		}
		sep := ", "
		if len(m.Content) == 0 {
			sep = ""
		}
		e.add(textEdit{line: line, col: col, text: sep + key + ": " + inline})
		e.comment(line, comment)
		return nil
	}
	col := m.Content[0].Column - 1
	pad := strings.Repeat(" ", col)
	var lines []string
	if inline != "" {
		lines = []string{pad + key + ": " + inline + "  # " + commentText(comment)}
	} else {
		lines = []string{pad + key + ":"}
		for _, b := range block {
			lines = append(lines, pad+strings.Repeat(" ", e.indent)+b)
		}
	}
	e.add(textEdit{line: e.blockEnd(m, col), col: -1, lines: lines})
	return nil
}

// endpointText is an allow entry as the README writes them: a bare host for port 443 alone.
func endpointText(host string, ports []uint16) string {
	if len(ports) == 1 && ports[0] == 443 {
		return scalar(host)
	}
	return fmt.Sprintf("{host: %s, ports: [%s]}", scalar(host), portList(ports))
}

// scalar writes s plain when YAML reads that back as the same string, else double-quoted: a name
// such as 0b0, yes or null would otherwise be read as a number, a boolean or nothing, and one
// starting with * as an alias.
func scalar(s string) string {
	var v map[string]any
	if !strings.ContainsAny(s, "{}[],#&*!|>'\"%@`: ") && yaml.Unmarshal([]byte("k: "+s), &v) == nil {
		if got, ok := v["k"].(string); ok && got == s {
			return s
		}
	}
	return strconv.Quote(s)
}

func portList(ports []uint16) string {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(int(p))
	}
	return strings.Join(ps, ", ")
}

// allow adds the endpoints to network.allow: a port to the entry that names the host already, else a
// new entry per host.
func (e *editor) allow(eps []Endpoint) error {
	if len(eps) == 0 {
		return nil
	}
	var hosts []string
	byHost := map[string][]Endpoint{}
	for _, ep := range eps {
		if byHost[ep.Host] == nil {
			hosts = append(hosts, ep.Host)
		}
		byHost[ep.Host] = append(byHost[ep.Host], ep)
	}
	network := get(e.root, "network")
	var seq *yaml.Node
	if network != nil {
		seq = get(network, "allow")
	}
	var fresh []item
	for _, h := range hosts {
		group := byHost[h]
		if seq != nil {
			if existing := findEntry(seq, h); existing != nil {
				if err := e.addPorts(existing, group); err != nil {
					return err
				}
				continue
			}
		}
		var ports []uint16
		var comments []string
		for _, ep := range group {
			ports = append(ports, ep.Port)
			comments = append(comments, ep.Comment())
		}
		fresh = append(fresh, item{text: endpointText(h, ports), comment: strings.Join(comments, "; ")})
	}
	if len(fresh) == 0 {
		return nil
	}
	var block []string
	for _, it := range fresh {
		block = append(block, "- "+it.text+"  # "+commentText(it.comment))
	}
	switch {
	case seq != nil:
		return e.appendSeq(seq, fresh)
	case network != nil:
		if network.Kind == yaml.MappingNode && network.Style&yaml.FlowStyle != 0 {
			var texts []string
			for _, it := range fresh {
				texts = append(texts, it.text)
			}
			return e.addKey(network, "allow", "["+strings.Join(texts, ", ")+"]", joinComments(fresh), nil)
		}
		return e.addKey(network, "allow", "", "", block)
	}
	for i := range block {
		block[i] = strings.Repeat(" ", e.indent) + block[i]
	}
	return e.addKey(e.root, "network", "", "", append([]string{"allow:"}, block...))
}

func joinComments(items []item) string {
	var cs []string
	for _, it := range items {
		cs = append(cs, it.text+": "+it.comment)
	}
	return strings.Join(cs, "; ")
}

// findEntry is the network.allow entry whose host is host, or nil.
func findEntry(seq *yaml.Node, host string) *yaml.Node {
	for _, it := range seq.Content {
		h := it
		if it.Kind == yaml.MappingNode {
			h = get(it, "host")
		}
		if h != nil && h.Kind == yaml.ScalarNode && strings.EqualFold(strings.TrimSuffix(h.Value, "."), host) {
			return it
		}
	}
	return nil
}

// addPorts adds the endpoints' ports to the allow entry it, which names their host.
func (e *editor) addPorts(it *yaml.Node, eps []Endpoint) error {
	var add []uint16
	var comments []string
	for _, ep := range eps {
		add = append(add, ep.Port)
		comments = append(comments, ep.Comment())
	}
	comment := strings.Join(comments, "; ")
	if it.Kind == yaml.ScalarNode {
		// A bare host means port 443.
		line := it.Line - 1
		width, err := e.scalarWidth(it)
		if err != nil {
			return err
		}
		ports := append([]uint16{443}, add...)
		e.add(textEdit{line: line, col: it.Column - 1, del: width, text: endpointText(it.Value, ports)})
		e.comment(line, comment)
		return nil
	}
	ports := get(it, "ports")
	if ports == nil {
		return e.addKey(it, "ports", "["+portList(append([]uint16{443}, add...))+"]", comment, nil)
	}
	var items []item
	for _, p := range add {
		items = append(items, item{text: strconv.Itoa(int(p)), comment: comment})
	}
	if ports.Style&yaml.FlowStyle != 0 {
		// One comment for the ports added to one list.
		items = []item{{text: portList(add), comment: comment}}
	}
	return e.appendSeq(ports, items)
}

// scalarWidth is how many bytes the scalar n takes in its line.
func (e *editor) scalarWidth(n *yaml.Node) (int, error) {
	l := e.lines[n.Line-1][n.Column-1:]
	switch {
	case n.Style&yaml.DoubleQuotedStyle != 0, n.Style&yaml.SingleQuotedStyle != 0:
		q := l[0]
		if end := strings.IndexByte(l[1:], q); end >= 0 && !strings.ContainsAny(n.Value, `"'\`) {
			return end + 2, nil
		}
	case strings.HasPrefix(l, n.Value):
		return len(n.Value), nil
	}
	return 0, fmt.Errorf("%s:%d: %w (the host %q is not written as a simple scalar)", e.name, n.Line, ErrCannotEdit, n.Value)
}

// http adds the entries to their network.http rules' allow lists.
func (e *editor) http(entries []HTTPEntry) error {
	if len(entries) == 0 {
		return nil
	}
	network := get(e.root, "network")
	var rules *yaml.Node
	if network != nil {
		rules = get(network, "http")
	}
	byRule := map[int][]item{}
	var order []int
	var fresh []string // hosts that get a rule of their own
	byHost := map[string][]HTTPEntry{}
	for _, h := range entries {
		if h.NewRule {
			if byHost[h.Host] == nil {
				fresh = append(fresh, h.Host)
			}
			byHost[h.Host] = append(byHost[h.Host], h)
			continue
		}
		if rules == nil || rules.Kind != yaml.SequenceNode || h.Rule >= len(rules.Content) {
			return fmt.Errorf("%s: network.http[%d]: no such rule in the file", e.name, h.Rule)
		}
		if host := get(rules.Content[h.Rule], "host"); host == nil || !strings.EqualFold(host.Value, h.RuleHost) {
			return fmt.Errorf("%s: network.http[%d] is not the rule for %s in the file", e.name, h.Rule, h.RuleHost)
		}
		if byRule[h.Rule] == nil {
			order = append(order, h.Rule)
		}
		byRule[h.Rule] = append(byRule[h.Rule], item{text: accessText(h), comment: h.Comment()})
	}
	if len(fresh) > 0 {
		if rules == nil || rules.Kind != yaml.SequenceNode {
			return fmt.Errorf("%s: no network.http list to add a rule to", e.name)
		}
		var items []item
		for _, host := range fresh {
			var accesses, comments []string
			for _, h := range byHost[host] {
				accesses, comments = append(accesses, accessText(h)), append(comments, h.Comment())
			}
			items = append(items, item{
				text:    fmt.Sprintf("{host: %s, allow: [%s]}", scalar(host), strings.Join(accesses, ", ")),
				comment: strings.Join(comments, "; ") + " (a rule of its own: the other names under the wildcard gain nothing)",
			})
		}
		if err := e.appendSeq(rules, items); err != nil {
			return err
		}
	}
	for _, r := range order {
		allow := get(rules.Content[r], "allow")
		if allow == nil {
			return fmt.Errorf("%s: network.http[%d] has no allow list", e.name, r)
		}
		if err := e.appendSeq(allow, byRule[r]); err != nil {
			return err
		}
	}
	return nil
}

// accessText is an HTTP entry as a network.http allow entry.
func accessText(h HTTPEntry) string {
	return fmt.Sprintf("{methods: [%s], paths: [%s]}", strings.Join(h.Methods, ", "), strconv.Quote(h.Path))
}

// Check parses the edited policy as cordon run would and confirms that it allows what the plan was
// for: every endpoint by the network matcher (presets expanded by presets), every HTTP entry by its
// rule. An edit that fails here is a bug of this package, never a file to write.
func Check(name string, edited []byte, opts policy.Options, presets policy.PresetSource, plan Plan) (*policy.Policy, error) {
	pol, err := policy.Parse(name, edited, opts)
	if err != nil {
		return nil, fmt.Errorf("the edited policy does not load: %w", err)
	}
	if len(plan.Allow) > 0 {
		if pol.Network == nil {
			return nil, errors.New("the edited policy has no network section")
		}
		m, err := pol.Network.Matcher(presets)
		if err != nil {
			return nil, fmt.Errorf("the edited policy: %w", err)
		}
		for _, ep := range plan.Allow {
			if d := m.Decide(ep.Host, ep.Port); !d.Allow {
				return nil, fmt.Errorf("the edited policy still refuses %s:%d (%s)", ep.Host, ep.Port, d.Reason)
			}
		}
	}
	for _, h := range plan.HTTP {
		if h.NewRule {
			if pol.Network == nil || !slices.ContainsFunc(pol.Network.HTTP, func(r policy.HTTPRule) bool { return r.Host == h.Host && ruleAllows(r, h) }) {
				return nil, fmt.Errorf("the edited policy has no network.http rule for %s allowing %s %s", h.Host, strings.Join(h.Methods, ","), h.Path)
			}
			continue
		}
		if pol.Network == nil || h.Rule >= len(pol.Network.HTTP) {
			return nil, fmt.Errorf("the edited policy lost network.http[%d]", h.Rule)
		}
		if !ruleAllows(pol.Network.HTTP[h.Rule], h) {
			return nil, fmt.Errorf("the edited policy's network.http[%d] does not allow %s %s", h.Rule, strings.Join(h.Methods, ","), h.Path)
		}
	}
	return pol, nil
}

func ruleAllows(r policy.HTTPRule, h HTTPEntry) bool {
	for _, a := range r.Allow {
		if slices.Equal(a.Methods, h.Methods) && slices.Contains(a.Paths, h.Path) {
			return true
		}
	}
	return false
}
