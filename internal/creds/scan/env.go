package scan

import (
	"strings"
)

// ScanEnv judges the variables (NAME=value) that a policy passes into the sandbox: a value that the
// content rules match (a token, a private key, a database URL with a password for a remote host), or a
// value that is not a placeholder under a name that says it is a secret (API_KEY, DB_PASSWORD). Values
// that are paths (GOOGLE_APPLICATION_CREDENTIALS=/path/key.json) are not secrets themselves. Findings
// come in the order of env, at most one per variable, and never hold the value.
func ScanEnv(env []string) []Finding {
	var found []Finding
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		var f *Finding
		matchContent([]byte(value), fileClass{}, func(_ int, kind, preview string) bool {
			f = &Finding{Env: name, Kind: kind, Preview: preview}
			return false
		})
		if f == nil && !strings.HasPrefix(value, "/") && assignmentSecret(name, value, false) {
			f = &Finding{Env: name, Kind: "secret-named variable", Preview: name + "=…"}
		}
		if f != nil {
			found = append(found, *f)
		}
	}
	return found
}
