package presets

import (
	"encoding/xml"
	"strings"
	"testing"
)

// FuzzSanitizeNpmrc: whatever the file, no line sanitizeNpmrc reports as an auth line survives in the
// copy the sandbox sees, and no line with an auth key does either.
func FuzzSanitizeNpmrc(f *testing.F) {
	f.Add("registry=https://r.internal/\n//r.internal/:_authToken=SECRET\n")
	f.Add("  //h:1/p/:_auth = \"x\"\n_password=y\nproxy=http://u:p@h/\n; c\n# d\n")
	f.Add("\"//h/:_authToken\" = SECRET\n//h/:_AUTHTOKEN=SECRET\n[sec]\nx._auth=SECRET\n")
	f.Fuzz(func(t *testing.T, text string) {
		kept, _ := sanitizeNpmrc(text, nil)
		for _, line := range strings.Split(kept, "\n") {
			k, _, ok := strings.Cut(strings.TrimSpace(line), "=")
			if !ok || strings.HasPrefix(strings.TrimSpace(line), "#") || strings.HasPrefix(strings.TrimSpace(line), ";") {
				continue
			}
			k = strings.Trim(strings.TrimSpace(k), `"'`)
			if i := strings.LastIndexAny(k, ":."); i >= 0 {
				k = k[i+1:]
			}
			for _, a := range npmAuthKeys {
				if strings.EqualFold(k, a) {
					t.Fatalf("auth line %q kept from %q", line, text)
				}
			}
		}
	})
}

// FuzzSanitizeMavenSettings: whatever the settings.xml, the copy the sandbox sees keeps no secret
// element except a password that is exactly a reference this package wrote.
func FuzzSanitizeMavenSettings(f *testing.F) {
	f.Add("<settings><servers><server><id>a</id><password>SECRET</password></server></servers></settings>", "a")
	f.Add("<server><id>b</id><passphrase>x</passphrase><privateKey>k</privateKey></server><proxy><password>p</password></proxy>", "b")
	f.Add(`<server><id>c</id><password a="1">SECRET</password><password
>SECRET</password><password><![CDATA[SECRET]]></password></server>`, "c")
	f.Fuzz(func(t *testing.T, text, id string) {
		ref := Ref("CORDON_MAVEN_TOKEN_1")
		refs := map[string]string{id: ref}
		out := sanitizeMavenSettings(text, refs)
		for _, m := range mavenSecret().FindAllString(out, -1) {
			if m != "<password>"+ref+"</password>" {
				t.Fatalf("secret element %q kept from %q", m, text)
			}
		}
		// What the replacement missed, the check must refuse: an XML reader finds no secret left.
		if checkMavenClean(out, refs) == nil {
			if strings.Contains(out, "SECRET") && strings.Contains(text, "SECRET") && secretElementHolds(out, "SECRET") {
				t.Fatalf("a secret survived both the replacement and the check: %q", out)
			}
		}
	})
}

// secretElementHolds reports whether an XML reader finds want inside a password, passphrase or
// privateKey element of text.
func secretElementHolds(text, want string) bool {
	d := xml.NewDecoder(strings.NewReader(text))
	d.Strict = false
	in := 0
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if n := t.Name.Local; n == "password" || n == "passphrase" || n == "privateKey" {
				in++
			}
		case xml.EndElement:
			if n := t.Name.Local; (n == "password" || n == "passphrase" || n == "privateKey") && in > 0 {
				in--
			}
		case xml.CharData:
			if in > 0 && strings.Contains(string(t), want) {
				return true
			}
		}
	}
}
