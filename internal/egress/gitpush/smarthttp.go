package gitpush

import (
	"net/url"
	"strings"
)

// Service is what a smart-HTTP request is, for Classify.
type Service int

// The requests of git's smart-HTTP protocol.
const (
	// NotGit is any other request.
	NotGit Service = iota
	// Fetch is a fetch or clone: GET .../info/refs?service=git-upload-pack or POST .../git-upload-pack.
	Fetch
	// PushRefs is a push's discovery: GET .../info/refs?service=git-receive-pack, which lists the
	// refs and changes nothing.
	PushRefs
	// Push is POST .../git-receive-pack, which updates refs.
	Push
	// PushOther is any other request that names receive-pack in its path or query: no git client
	// sends it, and a server might still route it to receive-pack.
	PushOther
)

// Classify tells what a request is by its method, its decoded path and its raw query, and names the
// repository it is for: the path before the protocol's part, lower-case, without a ".git" suffix
// ("acme/app" for "/Acme/App.git/info/refs"), since servers find a repository that way. Anything that
// names receive-pack but is not one of git's two requests for it is PushOther, so that a push cannot
// be dressed as something else.
func Classify(method, path, rawQuery string) (repo string, s Service) {
	query := strings.ToLower(rawQuery)
	if q, err := url.QueryUnescape(rawQuery); err == nil {
		query += " " + strings.ToLower(q)
	}
	lower := strings.ToLower(path)
	push := strings.Contains(lower, "receive-pack") || strings.Contains(query, "receive-pack")
	service := ""
	if vs, err := url.ParseQuery(rawQuery); err == nil && len(vs["service"]) == 1 {
		service = vs["service"][0]
	}
	switch {
	case method == "GET" && strings.HasSuffix(path, "/info/refs"):
		repo = repoOf(path, "/info/refs")
		switch {
		case service == "git-receive-pack":
			return repo, PushRefs
		case push:
			return repo, PushOther
		case service == "git-upload-pack":
			return repo, Fetch
		}
	case method == "POST" && strings.HasSuffix(path, "/git-receive-pack"):
		return repoOf(path, "/git-receive-pack"), Push
	case method == "POST" && strings.HasSuffix(path, "/git-upload-pack") && !push:
		return repoOf(path, "/git-upload-pack"), Fetch
	}
	if push {
		return repoOf(path, ""), PushOther
	}
	return "", NotGit
}

// repoOf is the repository of a path that ends in suffix; for a PushOther request (no suffix), the
// part before the first segment of git's protocol ("info", or one naming a pack service).
func repoOf(path, suffix string) string {
	p := strings.TrimPrefix(strings.TrimSuffix(path, suffix), "/")
	if suffix == "" {
		parts := strings.Split(p, "/")
		for i, seg := range parts {
			if seg = strings.ToLower(seg); seg == "info" || strings.Contains(seg, "-pack") {
				parts = parts[:i]
				break
			}
		}
		p = strings.Join(parts, "/")
	}
	return NormalRepo(p)
}

// NormalRepo is how repository names compare: lower-case, without a trailing "/" or ".git".
func NormalRepo(s string) string {
	return strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(s), "/"), ".git")
}
