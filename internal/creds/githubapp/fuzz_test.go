package githubapp

import (
	"strings"
	"testing"
)

// FuzzCheckGrant feeds the grant check repository names and full names as a server could send them,
// against a one-repository request, and holds the check to a plain oracle: a grant is accepted only if
// it names the requested repository (case aside) under the requested owner.
func FuzzCheckGrant(f *testing.F) {
	f.Add("acme/app", "app", "acme/app")
	f.Add("acme/app", "app", "evil/app")
	f.Add("app", "APP", "anyone/App")
	f.Add("acme/app", "app", "acme/app/extra")
	f.Add("acme/app", "app/x", "acme/app/x")
	f.Add("acme/app", "", "acme/")
	f.Fuzz(func(t *testing.T, requested, name, fullName string) {
		sc, err := parseScope([]string{requested}, map[string]string{"contents": "read"})
		if err != nil {
			return
		}
		err = sc.checkGrant("selected", []grantedRepository{{name, fullName}}, map[string]string{"contents": "read"})
		if err == nil {
			owner, repo, _ := strings.Cut(fullName, "/")
			reqOwner, reqName, _ := splitRepository(requested)
			if !strings.EqualFold(name, reqName) || !strings.EqualFold(repo, reqName) {
				t.Fatalf("accepted %q (%q) for a request of %q", fullName, name, requested)
			}
			if reqOwner != "" && !strings.EqualFold(owner, reqOwner) {
				t.Fatalf("accepted owner %q for a request of %q", owner, requested)
			}
		}
		if err != nil && len(err.Error()) > 2000 {
			t.Fatalf("error message unbounded: %d bytes", len(err.Error()))
		}
	})
}
