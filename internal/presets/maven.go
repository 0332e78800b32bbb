package presets

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// mavenSettings is the part of a settings.xml that says where artifacts come from and with which
// credentials.
type mavenSettings struct {
	Mirrors []struct {
		ID      string `xml:"id"`
		URL     string `xml:"url"`
		Blocked bool   `xml:"blocked"`
	} `xml:"mirrors>mirror"`
	Servers []struct {
		ID       string `xml:"id"`
		Username string `xml:"username"`
		Password string `xml:"password"`
	} `xml:"servers>server"`
	Repositories []struct {
		ID  string `xml:"id"`
		URL string `xml:"url"`
	} `xml:"profiles>profile>repositories>repository"`
	PluginRepositories []struct {
		ID  string `xml:"id"`
		URL string `xml:"url"`
	} `xml:"profiles>profile>pluginRepositories>pluginRepository"`
}

// mavenSecret matches the elements of a settings.xml that hold secrets, whatever their server. It and
// the other expressions here are compiled on first use, not at package initialisation, which every
// cordon process pays, the sandbox's init included.
var mavenSecret = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?s)<\s*(password|passphrase|privateKey)\b[^>]*>.*?<\s*/\s*(password|passphrase|privateKey)\s*>`)
})

// mavenView reads maven's settings as maven does (the installation's conf/settings.xml, then
// ~/.m2/settings.xml; mirrors and the repositories of profiles), allows every mirror and repository
// host, and gives the sandbox the user's settings.xml with each server's password replaced by the
// reference to a credential sent as Basic to that server's host alone (maven sends it after the
// server's 401). A server without a URL of its own, or with an encrypted password, is left without
// one, with a note.
//
// Maven's built-in central repository is named by no settings file, so it is not allowed here: a
// note says to mirror it or allow its host.
func (s Source) mavenView(v *View) ([]policy.Endpoint, error) {
	home := lookup(s.Env, "HOME")
	var files []string
	if mh := lookup(s.Env, "MAVEN_HOME"); mh != "" {
		files = append(files, filepath.Join(mh, "conf", "settings.xml"))
	} else if mvn, err := s.lookPath("mvn"); err == nil {
		// The installation's conf, next to the bin directory mvn's real path is in.
		if real, err := filepath.EvalSymlinks(mvn); err == nil {
			files = append(files, filepath.Join(filepath.Dir(filepath.Dir(real)), "conf", "settings.xml"))
		}
	}
	user := ""
	if home != "" {
		user = filepath.Join(home, ".m2", "settings.xml")
		files = append(files, user)
	}
	urls := map[string]string{} // mirror or repository id → URL
	var order []string
	var servers []struct{ id, username, password, from string }
	var userText, globalText, global string
	globalSecret := false
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if f != user {
			// The installation's conf (Debian keeps it in /etc/maven, which the sandbox's /etc does
			// not have): shown read-only, for mvn's own m2.conf and the global settings.
			if real, err := filepath.EvalSymlinks(filepath.Dir(f)); err == nil {
				v.showToolchain(real)
			}
			global, globalText = f, string(data)
		}
		var st mavenSettings
		if err := xml.Unmarshal(data, &st); err != nil {
			return nil, fmt.Errorf("preset maven: %s: %w", f, xmlError(err))
		}
		add := func(id, u string) {
			if u = strings.TrimSpace(u); u == "" {
				return
			}
			if _, ok := urls[id]; !ok {
				order = append(order, id)
			}
			urls[id] = u
		}
		for _, m := range st.Mirrors {
			if !m.Blocked {
				add(m.ID, m.URL)
			}
		}
		for _, r := range st.Repositories {
			add(r.ID, r.URL)
		}
		for _, r := range st.PluginRepositories {
			add(r.ID, r.URL)
		}
		for _, sv := range st.Servers {
			servers = append(servers, struct{ id, username, password, from string }{sv.ID, sv.Username, sv.Password, f})
			if f != user && sv.Password != "" {
				globalSecret = true
			}
		}
		if f == user {
			userText = string(data)
		}
	}
	var list []string
	for _, id := range order {
		list = append(list, urls[id])
	}
	var eps []policy.Endpoint
	if len(list) > 0 {
		var err error
		if eps, err = urlEndpoints("maven", list); err != nil {
			return nil, err
		}
	}
	if len(eps) == 0 {
		eps = []policy.Endpoint{}
		v.Notes = append(v.Notes, "maven: its built-in central repository is named by no settings file, so the preset does not allow it: mirror it in ~/.m2/settings.xml or allow its host in network.allow")
	}
	// The sandbox's settings.xml: the user's, every secret element replaced, a server's password by
	// its token's reference.
	refs := map[string]string{} // server id → reference
	for _, sv := range servers {
		u, ok := urls[sv.id]
		switch {
		case sv.password == "":
			continue
		case !ok:
			v.Notes = append(v.Notes, fmt.Sprintf("maven: server %s in %s names no mirror or repository; its password is not carried into the sandbox", sv.id, sv.from))
			continue
		case strings.HasPrefix(sv.password, "{") && strings.HasSuffix(sv.password, "}"):
			v.Notes = append(v.Notes, fmt.Sprintf("maven: server %s's password in %s is encrypted (settings-security.xml); it is not carried into the sandbox: make it a credential", sv.id, sv.from))
			continue
		case !strings.HasPrefix(u, "https://"):
			v.Notes = append(v.Notes, fmt.Sprintf("maven: server %s's password is not used: %s is not HTTPS, and a credential is only ever sent over TLS", sv.id, u))
			continue
		}
		t := Token{Name: tokenName("maven", len(v.Tokens)+1), Host: hostOf(u), Value: sv.password, Scheme: "basic", From: sv.from}
		v.Tokens = append(v.Tokens, t)
		refs[sv.id] = Ref(t.Name)
	}
	if userText != "" {
		clean := sanitizeMavenSettings(userText, refs)
		if err := checkMavenClean(clean, refs); err != nil {
			return nil, fmt.Errorf("preset maven: %s: %w", user, err)
		}
		v.Files = append(v.Files, File{HomeRel: ".m2/settings.xml", Content: []byte(clean)})
	}
	if globalSecret {
		// A secret in the global settings: the sandbox sees them without it.
		real := global
		if r, err := filepath.EvalSymlinks(global); err == nil {
			real = r
		}
		clean := sanitizeMavenSettings(globalText, refs)
		if err := checkMavenClean(clean, refs); err != nil {
			return nil, fmt.Errorf("preset maven: %s: %w", global, err)
		}
		v.Files = append(v.Files, File{Path: real, Replaces: real, Content: []byte(clean)})
	}
	return eps, nil
}

// mavenServer matches one <server> element, to find its id and replace its password.
var mavenServer = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?s)<server>.*?</server>`) })
var mavenID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?s)<id>\s*(.*?)\s*</id>`) })

// sanitizeMavenSettings replaces every secret element of a settings.xml: a server's password by its
// reference in refs (by server id), any other password, passphrase or private key by nothing.
func sanitizeMavenSettings(text string, refs map[string]string) string {
	text = mavenServer().ReplaceAllStringFunc(text, func(server string) string {
		ref := ""
		if m := mavenID().FindStringSubmatch(server); m != nil {
			ref = refs[m[1]]
		}
		return mavenSecret().ReplaceAllStringFunc(server, func(el string) string {
			if ref != "" && strings.HasPrefix(el, "<password>") {
				return "<password>" + ref + "</password>"
			}
			return ""
		})
	})
	// Outside a server (a proxy's password, say): removed as well; the references just written stay.
	kept := map[string]bool{}
	for _, ref := range refs {
		kept["<password>"+ref+"</password>"] = true
	}
	return mavenSecret().ReplaceAllStringFunc(text, func(el string) string {
		if kept[el] {
			return el
		}
		return ""
	})
}

// lookPath finds name in the caller's PATH (s.Env's), as the caller's shell would.
func (s Source) lookPath(name string) (string, error) {
	for _, dir := range filepath.SplitList(lookup(s.Env, "PATH")) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in the caller's PATH", name)
}

// checkMavenClean reads a sanitized settings.xml as XML and refuses it when any password,
// passphrase or privateKey element still holds something other than a reference written here: a
// form the textual replacement did not know must stop the run rather than reach the sandbox.
func checkMavenClean(text string, refs map[string]string) error {
	allowed := map[string]bool{}
	for _, r := range refs {
		allowed[r] = true
	}
	d := xml.NewDecoder(strings.NewReader(text))
	d.Strict = false
	var open []string
	var data strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() == "EOF" {
				return nil
			}
			return fmt.Errorf("cannot be read after removing its secrets: %w", xmlError(err))
		}
		switch t := tok.(type) {
		case xml.StartElement:
			open = append(open, t.Name.Local)
			data.Reset()
		case xml.CharData:
			data.Write(t)
		case xml.EndElement:
			name := t.Name.Local
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
			switch name {
			case "password", "passphrase", "privateKey":
				if v := strings.TrimSpace(data.String()); v != "" && !(name == "password" && allowed[v]) {
					return fmt.Errorf("a %s element could not be removed; the sandbox does not get this file", name)
				}
			}
			data.Reset()
		}
	}
}

// xmlError is a syntax error without the parser's text, which quotes what it found ("invalid
// character entity &ssw0rd", a piece of a password with an & in it).
func xmlError(err error) error {
	var se *xml.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("not valid XML (line %d)", se.Line)
	}
	return errors.New("not valid XML")
}
