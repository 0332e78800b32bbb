package githubapp

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseScope(t *testing.T) {
	rw := map[string]string{"contents": "write"}
	tests := []struct {
		name      string
		repos     []string
		perms     map[string]string
		wantOwner string
		wantRepos []string
		wantErr   string
	}{
		{"names", []string{"app", "docs"}, rw, "", []string{"app", "docs"}, ""},
		{"owner stripped", []string{"acme/app", "docs"}, rw, "acme", []string{"app", "docs"}, ""},
		{"duplicates folded", []string{"acme/App", "app", "ACME/app"}, rw, "acme", []string{"App"}, ""},
		{"dots and underscores", []string{"my.repo_1-x"}, rw, "", []string{"my.repo_1-x"}, ""},
		{"no repositories", nil, rw, "", nil, "no repositories"},
		{"no permissions", []string{"app"}, nil, "", nil, "no permissions"},
		{"two owners", []string{"acme/app", "evil/app"}, rw, "", nil, "owner differs"},
		{"empty name", []string{"acme/"}, rw, "", nil, "want \"owner/name\""},
		{"empty owner", []string{"/app"}, rw, "", nil, "owner must be"},
		{"nested path", []string{"acme/app/x"}, rw, "", nil, "want \"owner/name\""},
		{"dot-dot", []string{".."}, rw, "", nil, "want \"owner/name\""},
		{"space", []string{"my app"}, rw, "", nil, "want \"owner/name\""},
		{"newline", []string{"app\n"}, rw, "", nil, "want \"owner/name\""},
		{"owner with dot", []string{"ac.me/app"}, rw, "", nil, "owner must be"},
		{"bad level", []string{"app"}, map[string]string{"contents": "all"}, "", nil, "want read, write or admin"},
		{"bad permission name", []string{"app"}, map[string]string{"Contents": "read"}, "", nil, "permission name"},
		{"empty permission name", []string{"app"}, map[string]string{"": "read"}, "", nil, "permission name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := parseScope(tt.repos, tt.perms)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sc.owner != tt.wantOwner || !slices.Equal(sc.repos, tt.wantRepos) || !maps.Equal(sc.permissions, tt.perms) {
				t.Errorf("scope %+v, want owner %q repos %v perms %v", sc, tt.wantOwner, tt.wantRepos, tt.perms)
			}
		})
	}
	if _, err := parseScope(slices.Repeat([]string{"a"}, maxRepositories+1), rw); err == nil {
		t.Error("more repositories than GitHub accepts: no error")
	}
}

// TestCheckGrant feeds grants a server might answer with. The first case is the exact grant, accepted,
// so the refusals are refusals of the difference and not of everything.
func TestCheckGrant(t *testing.T) {
	sc, err := parseScope([]string{"acme/app", "docs"}, map[string]string{"contents": "write", "issues": "read"})
	if err != nil {
		t.Fatal(err)
	}
	repos := []grantedRepository{{"app", "acme/app"}, {"docs", "acme/docs"}}
	perms := map[string]string{"contents": "write", "issues": "read", "metadata": "read"}
	with := func(k, v string) map[string]string {
		p := maps.Clone(perms)
		if v == "" {
			delete(p, k)
		} else {
			p[k] = v
		}
		return p
	}
	tests := []struct {
		name      string
		selection string
		repos     []grantedRepository
		perms     map[string]string
		wantErr   string
	}{
		{"exact", "selected", repos, perms, ""},
		{"without metadata", "selected", repos, with("metadata", ""), ""},
		{"no selection field", "", repos, perms, ""},
		{"case differs", "selected", []grantedRepository{{"App", "ACME/App"}, {"docs", "acme/docs"}}, perms, ""},
		{"selection all", "all", repos, perms, "repository_selection \"all\""},
		{"extra repository", "selected", append(slices.Clone(repos), grantedRepository{"infra", "acme/infra"}), perms, "\"acme/infra\", which was not asked for"},
		{"same name, other owner", "selected", []grantedRepository{{"app", "evil/app"}, {"docs", "acme/docs"}}, perms, "\"evil/app\", asked for acme/app"},
		{"full name disagrees with name", "selected", []grantedRepository{{"app", "acme/other"}, {"docs", "acme/docs"}}, perms, "cannot confirm its owner"},
		{"no full name", "selected", []grantedRepository{{"app", ""}, {"docs", "acme/docs"}}, perms, "cannot confirm its owner"},
		{"repositories missing", "selected", nil, perms, "lists no repositories"},
		{"fewer repositories", "selected", repos[:1], perms, "does not cover repository \"docs\""},
		{"extra permission", "selected", repos, with("administration", "write"), "administration:write, which was not asked for"},
		{"metadata write", "selected", repos, with("metadata", "write"), "metadata:write, which was not asked for"},
		{"higher level", "selected", repos, with("issues", "write"), "broader than the read asked for"},
		{"admin", "selected", repos, with("contents", "admin"), "broader"},
		{"unknown level", "selected", repos, with("issues", "owner"), "unknown level"},
		{"lower level", "selected", repos, with("contents", "read"), "contents:\"read\", asked for write"},
		{"permission missing", "selected", repos, with("issues", ""), "issues:\"\", asked for read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sc.checkGrant(tt.selection, tt.repos, tt.perms)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("exact grant refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestPrintable(t *testing.T) {
	if got := printable("a\r\nb\x1b[31m\u0085c"); got != "a??b?[31m?c" {
		t.Errorf("printable = %q", got)
	}
	if got := printable(strings.Repeat("x", 1000)); len(got) > 210 || !strings.HasSuffix(got, "…") {
		t.Errorf("not bounded: %d bytes", len(got))
	}
}
