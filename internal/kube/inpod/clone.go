// Package inpod is the pieces of cordon that run inside a run's pod, each a subcommand of cordon's
// binary (kubepod names them and the pod's layout): the setup step and the gateway sidecar, the
// clone step that fetches the repository, the agent's wrapper that runs the command and turns what
// it changed into a patch, the keeper that holds the pod open, and the fetch that streams the
// results back. They run in containers of an image cordon does not choose (the agent's), so each
// builds the environment of what it starts itself and trusts nothing the agent could have left
// behind.
package inpod

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// CloneOptions says what the clone step fetches and where.
type CloneOptions struct {
	// Repo is the repository's URL (fetched through the pod's gateway), Ref a branch, a tag or a
	// commit, and Dir the working tree to make (absent or empty).
	Repo, Ref, Dir string
	// Env is the step's environment: its PATH finds git, and its trust and proxy settings are the
	// only part of it git sees (see gitEnv).
	Env []string
	// Stdout receives the commit's full hash, as does TerminationLog (kubepod.TerminationLog when
	// empty) when that file exists: it is the container's termination message, which cordon reads
	// through the API.
	Stdout         io.Writer
	TerminationLog string
	// Auth, when set, is an HTTP header ("Authorization: Bearer PLACEHOLDER") git sends to the
	// repository: it holds a credential's placeholder, which the pod's gateway replaces with the
	// real value on the way out, as it does for the agent's own requests.
	Auth string
}

// AuthHeader is the header Clone sends for a credential whose placeholder is placeholder: the
// credential's own header, else Authorization with its scheme (basic as git hosts take a token:
// x-access-token and the token as the password).
func AuthHeader(placeholder, scheme, header string) string {
	switch {
	case header != "":
		return header + ": " + placeholder
	case scheme == "basic":
		return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+placeholder))
	default:
		return "Authorization: Bearer " + placeholder
	}
}

// Clone makes Dir a git repository holding the commit Ref names in Repo, checked out detached, and
// returns the commit's full hash. It fetches only that commit where the server allows it and
// everything otherwise. Dir/.git/hooks is an empty directory and Dir/.git/config exists, because
// the pod mounts both read-only into the agent's container. An error is one line naming the
// repository, the ref and git's own message; it is also the termination message when the file
// exists, so that cordon can say why without reading the container's log.
func Clone(ctx context.Context, o CloneOptions) (string, error) {
	commit, err := clone(ctx, o)
	if err != nil {
		err = fmt.Errorf("cloning %s at %s: %w", redactURL(o.Repo), o.Ref, err)
		writeTerminationLog(o.TerminationLog, err.Error())
		return "", err
	}
	writeTerminationLog(o.TerminationLog, commit)
	if o.Stdout != nil {
		if _, err := fmt.Fprintln(o.Stdout, commit); err != nil {
			return "", fmt.Errorf("clone: writing the commit: %w", err)
		}
	}
	return commit, nil
}

func clone(ctx context.Context, o CloneOptions) (string, error) {
	switch {
	case o.Repo == "" || strings.HasPrefix(o.Repo, "-"):
		return "", fmt.Errorf("the repository %q is not a URL", o.Repo)
	case !validRef(o.Ref):
		return "", fmt.Errorf("the ref %q is not a branch, tag or commit name", o.Ref)
	case o.Dir == "":
		return "", errors.New("no directory to clone into")
	}
	if err := emptyOrAbsent(o.Dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return "", fmt.Errorf("making the checkout: %w", err)
	}
	gitPath, err := lookPath(o.Env, "git")
	if err != nil {
		return "", err
	}
	env := gitEnv(o.Env)
	if o.Auth != "" {
		// For this step's git only: the header is in no file of the checkout.
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0="+o.Auth)
	}
	g := &gitRunner{path: gitPath, env: env, dir: o.Dir,
		flags: []string{"-c", "core.hooksPath=/dev/null", "-c", "advice.detachedHead=false"}}
	// No template: git's sample hooks are not copied, and nothing else of the image's git share.
	if _, err := g.run(ctx, "init", "-q", "--template="); err != nil {
		return "", err
	}
	if err := os.Mkdir(filepath.Join(o.Dir, ".git", "hooks"), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("making .git/hooks: %w", err)
	}
	// origin names the repository for the agent's git (fetch and push go through the gateway).
	for _, kv := range [][2]string{{"remote.origin.url", o.Repo}, {"remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"}} {
		if _, err := g.run(ctx, "config", kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	commit, err := fetchRef(ctx, g, o.Ref)
	if err != nil {
		return "", err
	}
	if _, err := g.run(ctx, "checkout", "-q", "--detach", commit); err != nil {
		return "", err
	}
	head, err := g.run(ctx, "rev-parse", "--verify", "HEAD")
	if err != nil {
		return "", err
	}
	if head = strings.TrimSpace(head); head != commit {
		return "", fmt.Errorf("checked out %s, not the fetched %s", head, commit)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, ".git", "config")); err != nil {
		return "", fmt.Errorf("the checkout has no .git/config: %w", err)
	}
	return commit, nil
}

// fetchRef fetches ref from origin and returns the commit it names: first only that commit
// (--depth=1), then the ref with its history (a server that cannot make shallow packs: dumb HTTP),
// and, for a commit that the server will not send by its name (protocol v0 refuses a commit no ref
// points at), every branch and tag, in which the commit is then looked up.
func fetchRef(ctx context.Context, g *gitRunner, ref string) (string, error) {
	var lastErr error
	for _, depth := range [][]string{{"--depth=1"}, nil} {
		args := append(append([]string{"fetch", "-q", "--no-tags"}, depth...), "origin", ref)
		if _, err := g.run(ctx, args...); err != nil {
			lastErr = err
			continue
		}
		return resolveCommit(ctx, g, "FETCH_HEAD", ref)
	}
	if !isHex(ref) {
		return "", lastErr
	}
	if _, err := g.run(ctx, "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"); err != nil {
		return "", err
	}
	return resolveCommit(ctx, g, ref, ref)
}

// resolveCommit returns the commit name (FETCH_HEAD or a hash) peels to; when the ref asked for was
// a hash, the commit must be the one it names.
func resolveCommit(ctx context.Context, g *gitRunner, name, ref string) (string, error) {
	out, err := g.run(ctx, "rev-parse", "--verify", "--end-of-options", name+"^{commit}")
	if err != nil {
		if name != "FETCH_HEAD" {
			return "", fmt.Errorf("the repository has no commit %s", ref)
		}
		return "", err
	}
	commit := strings.TrimSpace(out)
	if isHex(ref) && !strings.HasPrefix(commit, strings.ToLower(ref)) {
		return "", fmt.Errorf("the server sent commit %s for %s", commit, ref)
	}
	return commit, nil
}

// gitRunner runs git with a fixed environment, directory and leading flags.
type gitRunner struct {
	path  string
	env   []string
	dir   string
	flags []string
}

// run runs git with args and returns its standard output; an error carries git's own message.
func (g *gitRunner) run(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	if err := g.runTo(ctx, &stdout, &stderr, args...); err != nil {
		return "", err
	}
	return stdout.String(), nil
}

// runTo runs git with its standard output going to stdout; stderr collects its messages.
func (g *gitRunner) runTo(ctx context.Context, stdout io.Writer, stderr *bytes.Buffer, args ...string) error {
	cmd := exec.CommandContext(ctx, g.path, append(append([]string{}, g.flags...), args...)...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = g.env, g.dir, stdout, stderr
	if err := cmd.Run(); err != nil {
		return &gitError{verb: args[0], msg: gitMessage(stderr.Bytes(), err), err: err}
	}
	return nil
}

// gitError is a git that failed: its subcommand and its own message, on one line.
type gitError struct {
	verb, msg string
	err       error
}

func (e *gitError) Error() string { return "git " + e.verb + ": " + e.msg }
func (e *gitError) Unwrap() error { return e.err }

// gitMessage is git's own account of a failure, on one line: its "fatal:" and "error:" lines, else
// its last line, else how it ended.
func gitMessage(stderr []byte, err error) string {
	var picked, last []string
	for _, line := range strings.Split(string(stderr), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		last = []string{line}
		for _, p := range []string{"fatal: ", "error: "} {
			if strings.HasPrefix(line, p) {
				picked = append(picked, strings.TrimPrefix(line, p))
			}
		}
	}
	if len(picked) == 0 {
		picked = last
	}
	if len(picked) == 0 {
		return err.Error()
	}
	msg := strings.Join(picked, "; ")
	if len(msg) > 1000 {
		msg = msg[:1000] + "…"
	}
	return msg
}

// gitEnv is the environment of every git the pod's pieces run, built from nothing: no variable of the
// container's (GIT_DIR, GIT_CONFIG_*, GIT_EXEC_PATH, an askpass, HOME and XDG_CONFIG_HOME, which
// name the user's configuration, attributes and ignore files) can steer it. There is no system or
// global configuration and no prompt; the caller's PATH, trust store and proxies are kept, since
// the clone goes through the pod's gateway with its CA (SSL_CERT_FILE also as GIT_SSL_CAINFO).
func gitEnv(env []string) []string {
	out := []string{
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		// Only the transports the gateway judges: no ext:: (a command), file:// or ssh from a URL or
		// a submodule's.
		"GIT_ALLOW_PROTOCOL=https:http",
		"HOME=/nonexistent", "LC_ALL=C", "PATH=" + pathOf(env),
	}
	certFile, caInfo := "", false
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case "SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSL_CAINFO",
			"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy":
			out = append(out, kv)
		}
		switch name {
		case "SSL_CERT_FILE":
			certFile = value
		case "GIT_SSL_CAINFO":
			caInfo = true
		}
	}
	// A git built with GnuTLS reads no SSL_CERT_FILE: it is said to git in git's own terms too.
	if certFile != "" && !caInfo {
		out = append(out, "GIT_SSL_CAINFO="+certFile)
	}
	return out
}

// defaultPath is the search path when the environment has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// pathOf is env's PATH, or defaultPath.
func pathOf(env []string) string {
	p := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			p = v
		}
	}
	if p == "" {
		return defaultPath
	}
	return p
}

// lookPath finds name as a shell would with env's PATH (defaultPath when env has none; the
// process's own may differ from the environment cordon was given), relative directories skipped
// (hosttool.Find). A name with a slash is taken as it is.
func lookPath(env []string, name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	return hosttool.Find(name, []string{"PATH=" + pathOf(env)})
}

// validRef refuses what git would read as an option or a refspec with a destination; the rest is
// git's to judge.
func validRef(ref string) bool {
	if ref == "" || strings.HasPrefix(ref, "-") {
		return false
	}
	for _, c := range ref {
		if c <= ' ' || c == 0x7f || c == ':' {
			return false
		}
	}
	return true
}

// isHex says whether s could be (a prefix of) a commit's hash.
func isHex(s string) bool {
	if len(s) < 4 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// emptyOrAbsent refuses a directory that already holds something: the clone never merges into one.
func emptyOrAbsent(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("the checkout directory: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("the checkout directory %s is not empty", dir)
	}
	return nil
}

// redactURL hides the user part of a repository's URL (a token, often) before it is printed.
func redactURL(repo string) string {
	if u, err := url.Parse(repo); err == nil && u.User != nil {
		u.User = url.User("xxxxx")
		return u.String()
	}
	return repo
}

// writeTerminationLog writes msg to the container's termination message file when it exists (it
// does in a pod; elsewhere nothing is created).
func writeTerminationLog(path, msg string) {
	if path == "" {
		path = kubepod.TerminationLog
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(msg)
}
