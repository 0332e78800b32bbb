package intercept

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/egress/gitpush"
)

// Git push rules (Config.Git): on a host with one, fetches of the rule's repositories are allowed
// whatever the HTTP rules say, a push to them is read (gitpush.Read) and refused by the refs it would
// change, and a push to any other repository on the host is refused unless an HTTP rule for the host
// allows it. Every other request to the host is judged as if the git rule were not there.

// GitRule says what may be pushed to the repositories Repos on Host (network.git).
type GitRule struct {
	// Host is the exact name the rule is for.
	Host string
	// Repos are repository paths ("owner/name"), compared as gitpush.NormalRepo does.
	Repos []string
	// Push is what a push may change; its Source names the rule in denials ("network.git[0]").
	Push gitpush.Rule
}

// The audit details of a request a git rule judged.
const (
	detailGitRepo    = "git_repo"
	detailGitService = "git_service"
	detailGitRefs    = "git_refs"
	detailGitOptions = "git_push_options"
)

// maxLoggedRefs bounds the ref updates listed in one audit event.
const maxLoggedRefs = 20

// maxDrain bounds what is read (and dropped) of a refused push's pack before the refusal is sent: a
// client still sending when the answer comes and the connection closes may report the broken
// connection instead of the reasons.
const maxDrain = 64 << 20

type gitRule struct {
	host  string
	repos map[string]bool
	push  gitpush.Rule
}

func compileGit(in []GitRule) ([]gitRule, error) {
	var out []gitRule
	for _, g := range in {
		hp, err := parseHostPattern(g.Host)
		if err != nil || hp.exact == "" {
			return nil, fmt.Errorf("intercept: %s: git host %q: want an exact name", g.Push.Source, g.Host)
		}
		if err := g.Push.Check(); err != nil {
			return nil, fmt.Errorf("intercept: %w", err)
		}
		c := gitRule{host: hp.exact, repos: map[string]bool{}, push: g.Push}
		for _, r := range g.Repos {
			c.repos[gitpush.NormalRepo(r)] = true
		}
		out = append(out, c)
	}
	return out, nil
}

func (i *Interceptor) gitFor(name string) *gitRule {
	for k := range i.git {
		if i.git[k].host == name {
			return &i.git[k]
		}
	}
	return nil
}

// gitOutcome is a git rule's answer for one request.
type gitOutcome int

const (
	gitPass   gitOutcome = iota // not the git rule's business: the HTTP rules judge it
	gitAllow                    // allowed by the git rule, whatever the HTTP rules say
	gitDeny                     // refused with an HTTP error (denial.status)
	gitRefuse                   // a push refused with receive-pack's own answer (denial.body)
)

type gitVerdict struct {
	outcome gitOutcome
	status  int
	rule    string
	reason  string
	fix     string
	body    []byte // the receive-pack answer of gitRefuse
	message string // what git prints as "remote:" lines
	details map[string]string
}

// judgeGit decides a request to g's host. target is the request-target as sent; extra says the
// request asks for an upgrade or carries override headers or a body on a bodyless method, which no
// git request does.
func (i *Interceptor) judgeGit(g *gitRule, r *http.Request, target string, extra bool) gitVerdict {
	src := g.push.Source
	p, err := canonicalPath(target)
	if err != nil {
		// A server may read the path another way, and route it to receive-pack.
		return gitVerdict{outcome: gitDeny, status: http.StatusBadRequest, rule: src, reason: err.Error()}
	}
	_, query, _ := strings.Cut(target, "?")
	repo, svc := gitpush.Classify(r.Method, p, query)
	if svc == gitpush.NotGit {
		return gitVerdict{outcome: gitPass}
	}
	v := gitVerdict{rule: src, details: map[string]string{detailGitRepo: repo, detailGitService: serviceName(svc)}}
	listed := g.repos[repo]
	switch {
	case !listed && svc == gitpush.Fetch:
		v.outcome = gitPass // another repository's fetch is the HTTP rules' business, as without the git rule
		return v
	case svc == gitpush.PushOther && (listed || !i.rules.covers(g.host)):
		// To a listed repository whatever the HTTP rules say: a server that reads the path its own
		// way (a trailing slash dropped) would take it as a push the git rule never read.
		v.outcome, v.status = gitDeny, http.StatusForbidden
		v.reason = fmt.Sprintf("%s %s names receive-pack but is not a request git sends to push", r.Method, p)
		return v
	case !listed:
		if i.rules.covers(g.host) {
			v.outcome = gitPass // an HTTP rule for the host may allow it: the user opened it there
			return v
		}
		v.outcome, v.status, v.rule = gitDeny, http.StatusForbidden, src+".repos"
		v.reason = fmt.Sprintf("pushing to %s is not allowed: %s does not list it", repo, src)
		v.fix = fmt.Sprintf("add %s to %s.repos", repo, src)
		return v
	case extra:
		v.outcome, v.status = gitDeny, http.StatusForbidden
		v.reason = "a git request with an upgrade, a method-override header or a body on " + r.Method + " is refused"
		return v
	case svc != gitpush.Push:
		v.outcome = gitAllow // fetch and push discovery of a listed repository
		return v
	}
	return i.judgePush(g, r, repo, v)
}

// judgePush reads the ref updates of a push to a listed repository and judges them.
func (i *Interceptor) judgePush(g *gitRule, r *http.Request, repo string, v gitVerdict) gitVerdict {
	encodings := r.Header.Values("Content-Encoding")
	if len(encodings) > 1 || strings.Contains(strings.Join(encodings, ""), ",") {
		v.outcome, v.status, v.reason = gitDeny, http.StatusBadRequest, "a push body with more than one Content-Encoding is refused"
		return v
	}
	body := r.Body
	if body == nil {
		body = http.NoBody
	}
	req, replay, err := gitpush.Read(body, strings.Join(encodings, ""))
	if err != nil {
		v.outcome, v.status, v.reason = gitDeny, http.StatusForbidden, "the push could not be read, so it is refused: "+err.Error()
		return v
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{replay, body}
	v.details[detailGitRefs] = refList(req.Commands)
	if n := len(req.PushOptions); n > 0 {
		v.details[detailGitOptions] = strconv.Itoa(n)
	}
	refused := g.push.Judge(req)
	if len(refused) == 0 {
		v.outcome = gitAllow
		return v
	}
	first := refused[0]
	v.rule, v.reason, v.fix = first.Rule, fmt.Sprintf("push to %s refused: %s", repo, first.Reason), first.Fix
	reasons := make(map[string]string, len(refused))
	for _, rf := range refused {
		reasons[rf.Ref] = "cordon: " + rf.Reason
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "cordon: refused this whole push to %s: %s\n", repo, first.Reason)
	if first.Fix != "" {
		fmt.Fprintf(&msg, "cordon: to allow: %s (in the policy file)\n", first.Fix)
	}
	if len(req.Commands) > 1 {
		fmt.Fprintf(&msg, "cordon: %d of the %d refs pushed are refused, so none is pushed\n", len(refused), len(req.Commands))
	}
	v.message = msg.String()
	if !req.Reports() {
		// The client reads no report, so it could show no reason: refuse with an HTTP error.
		v.outcome, v.status = gitDeny, http.StatusForbidden
		return v
	}
	v.outcome, v.status = gitRefuse, http.StatusOK
	v.body = gitpush.Refusal(req, reasons, "cordon: refused with the rest of the push", v.message)
	return v
}

// writeGitRefusal answers a refused push as receive-pack would answer one whose refs a hook declined,
// once the rest of the request (the pack, which goes nowhere) is read.
func writeGitRefusal(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
	}
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", gitpush.ResultType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// refList is the audit form of a push's ref updates, bounded.
func refList(cmds []gitpush.Command) string {
	var parts []string
	for k, c := range cmds {
		if k == maxLoggedRefs {
			parts = append(parts, fmt.Sprintf("and %d more", len(cmds)-k))
			break
		}
		parts = append(parts, c.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func serviceName(s gitpush.Service) string {
	switch s {
	case gitpush.Fetch:
		return "fetch"
	case gitpush.PushRefs:
		return "push-discovery"
	case gitpush.Push:
		return "push"
	}
	return "other-receive-pack"
}
