package presets

import (
	"strings"
	"testing"
)

// FuzzSanitizeNpmrc: whatever the file, no line sanitizeNpmrc reports as an auth line survives in the
// copy the sandbox sees, and no line with an auth key does either.
func FuzzSanitizeNpmrc(f *testing.F) {
	f.Add("registry=https://r.internal/\n//r.internal/:_authToken=SECRET\n")
	f.Add("  //h:1/p/:_auth = \"x\"\n_password=y\nproxy=http://u:p@h/\n; c\n# d\n")
	f.Fuzz(func(t *testing.T, text string) {
		kept, _ := sanitizeNpmrc(text, nil)
		for _, line := range strings.Split(kept, "\n") {
			k, _, ok := strings.Cut(strings.TrimSpace(line), "=")
			if !ok || strings.HasPrefix(strings.TrimSpace(line), "#") || strings.HasPrefix(strings.TrimSpace(line), ";") {
				continue
			}
			k = strings.TrimSpace(k)
			if i := strings.LastIndex(k, ":"); strings.HasPrefix(k, "//") && i > 0 {
				k = k[i+1:]
			}
			for _, a := range npmAuthKeys {
				if k == a {
					t.Fatalf("auth line %q kept from %q", line, text)
				}
			}
		}
	})
}
