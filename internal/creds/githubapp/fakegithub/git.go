package fakegithub

import (
	"net/http"
	"path"
	"strings"
)

// GitAuth guards a git smart-HTTP handler (git http-backend behind net/http/cgi, say) the way GitHub
// guards git over HTTPS with an installation token, so an end-to-end test can serve real repositories
// and see what a token can really do with them.
//
// Repositories are at GitHub's paths, /OWNER/REPO.git/…, so the backend's project root holds
// OWNER/REPO.git. The token comes as the password of Basic authentication (git's credential helpers
// send "x-access-token:TOKEN"; the user name is ignored, as on GitHub) or as a Bearer/token
// Authorization header. Pushing (git-receive-pack) needs contents:write; anything else contents:read.
// Like GitHub, it answers 401 with a Basic challenge to a missing or dead token, 404 for a repository
// the token does not cover (not revealing that it exists) and 403 for a push with a read-only token.
func (s *Server) GitAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		repo, ok := gitRepository(r.URL.Path)
		if !ok {
			http.NotFound(w, r)
			return
		}
		tok := gitToken(r)
		if tok == "" || !s.Valid(tok) {
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(w, "Invalid username or token.", http.StatusUnauthorized)
			return
		}
		if !s.Authorize(tok, repo, false) {
			http.Error(w, "Repository not found.", http.StatusNotFound)
			return
		}
		write := strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack"
		if write && !s.Authorize(tok, repo, true) {
			http.Error(w, "Permission to "+repo+".git denied.", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// gitRepository reads "owner/repo" from a smart-HTTP path, /owner/repo(.git)/(info/refs|git-*-pack).
// A path that is not already clean ("..", "//") is refused, so the repository judged here is the one
// the backend serves.
func gitRepository(p string) (string, bool) {
	if path.Clean(p) != p {
		return "", false
	}
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 3)
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" || parts[0] == ".." || parts[1] == ".." {
		return "", false
	}
	return parts[0] + "/" + strings.TrimSuffix(parts[1], ".git"), true
}

func gitToken(r *http.Request) string {
	if _, pw, ok := r.BasicAuth(); ok {
		return pw
	}
	h := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
		return tok
	}
	if tok, ok := strings.CutPrefix(h, "token "); ok {
		return tok
	}
	return ""
}
