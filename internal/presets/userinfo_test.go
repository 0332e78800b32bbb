package presets

import (
	"strings"
	"testing"
)

// TestStripUserinfoNamesNoSecret: a URL whose user name is the token (no password) is refused, and the
// message does not carry the name; a token's From does not carry the user name either.
func TestStripUserinfoNamesNoSecret(t *testing.T) {
	_, err := Source{}.stripUserinfo(&View{}, "pypi", "https://glpat-TOKENASUSER@gitlab.internal/simple/")
	if err == nil || strings.Contains(err.Error(), "TOKENASUSER") {
		t.Errorf("error %v", err)
	}
	v := &View{}
	if _, err := (Source{}).stripUserinfo(v, "go", "https://USERSECRET:pw@proxy.internal/"); err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 1 || strings.Contains(v.Tokens[0].From, "USERSECRET") {
		t.Errorf("tokens %+v", v.Tokens)
	}
}
