package intercept

import (
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/egress/gitpush"
)

// FuzzGitClassify attacks the git rule's reading of a request-target: whatever it lets past
// unread (not git, or a fetch) must not be a push on a lenient server's reading of it (decoded,
// case folded, cleaned, trailing slash dropped, every query parameter looked at).
func FuzzGitClassify(f *testing.F) {
	f.Add("POST", "/acme/app.git/git-receive-pack")
	f.Add("POST", "/acme/app.git/git-receive-pack/")
	f.Add("GET", "/acme/app.git/info/refs?service=git-upload-pack&service=git-receive-pack")
	f.Add("POST", "/acme/app.git/git-upload-pack?service=git-receive-pack")
	f.Add("POST", "/acme/app.git/git-receive%2dpack")
	f.Add("GET", "/acme/app.git/info/refs?service=git-receive%2Dpack")
	f.Fuzz(func(t *testing.T, method, target string) {
		p, err := canonicalPath(target)
		if err != nil {
			return // judgeGit refuses it
		}
		_, query, _ := strings.Cut(target, "?")
		repo, svc := gitpush.Classify(method, p, query)
		if svc != gitpush.NotGit && svc != gitpush.Fetch {
			if repo != gitpush.NormalRepo(repo) {
				t.Fatalf("repository %q not in normal form", repo)
			}
			return // read, or refused, or left to the HTTP rules only for an unlisted repository
		}
		lenient := strings.ToLower(path.Clean(p))
		q, _ := url.QueryUnescape(strings.ReplaceAll(query, "+", " "))
		if strings.Contains(lenient, "receive-pack") || strings.Contains(strings.ToLower(q), "receive-pack") || strings.Contains(strings.ToLower(query), "receive-pack") {
			t.Fatalf("%s %q passed as %d, but a server may read it as a push", method, target, svc)
		}
	})
}
