package scan

import (
	"bytes"
	"math"
	"strings"
)

// placeholderWords are values that stand for a secret rather than being one.
var placeholderWords = map[string]bool{
	"password": true, "passwd": true, "secret": true, "token": true, "changeme": true, "changeit": true,
	"null": true, "none": true, "nil": true, "undefined": true, "todo": true, "tbd": true, "test": true,
	"foo": true, "bar": true, "foobar": true, "redacted": true, "hidden": true, "masked": true,
}

// placeholderParts mark a value as a stand-in wherever they appear in it.
var placeholderParts = []string{
	"example", "placeholder", "changeme", "change_me", "change-me", "replace", "your", "redacted",
	"xxxx", "****", "dummy", "insert", "${", "{{", "<", "…", "...",
}

// isPlaceholder reports whether a value is empty, a reference to something else ($VAR, ${VAR},
// %s, {{ .X }}, <password>), or a stand-in (changeme, xxxx, your-token-here): not a secret.
func isPlaceholder(v string) bool {
	v = strings.TrimSpace(v)
	if v == "" || strings.ContainsAny(v[:1], "$%<{[") {
		return true
	}
	if strings.Trim(v, v[:1]) == "" {
		return true // one character repeated: xxxxx, *****, ...
	}
	lower := strings.ToLower(v)
	if placeholderWords[lower] {
		return true
	}
	for _, p := range placeholderParts {
		if strings.Contains(lower, p) {
			return true
		}
	}
	return false
}

// secretWords are the parts of a variable name (split at _ - .) that say its value is a secret.
var secretWords = map[string]bool{
	"TOKEN": true, "SECRET": true, "PASSWORD": true, "PASSWD": true, "PASS": true, "PASSPHRASE": true,
	"APIKEY": true, "CREDENTIAL": true, "CREDENTIALS": true, "PRIVATEKEY": true,
}

// secretLastWords say a secret only as the last part of a name: BASIC_AUTH, GITLAB_PAT; but
// AUTH_SERVER and AUTH_DOMAIN are not secrets.
var secretLastWords = map[string]bool{"AUTH": true, "PAT": true, "KEY": true}

// notSecretLast are last parts of a name that say the value is about a secret, not the secret: a path
// to it, its user, its lifetime.
var notSecretLast = map[string]bool{
	"FILE": true, "PATH": true, "DIR": true, "SOCK": true, "SOCKET": true, "URL": true, "URI": true,
	"HOST": true, "PORT": true, "USER": true, "USERNAME": true, "NAME": true, "ID": true, "ENDPOINT": true,
	"REGION": true, "TYPE": true, "MODE": true, "ENABLED": true, "TTL": true, "EXPIRY": true,
	"EXPIRES": true, "TIMEOUT": true, "HEADER": true, "ALGORITHM": true, "LENGTH": true, "FORMAT": true,
	"VERSION": true, "PREFIX": true, "COMMAND": true, "CMD": true, "HELPER": true, "PROVIDER": true,
}

// notSecretKeyQualifiers make a "..._KEY" name public: PUBLIC_KEY, PUBLISHABLE_KEY.
var notSecretKeyQualifiers = map[string]bool{"PUBLIC": true, "PUBLISHABLE": true, "PUB": true}

// secretName reports whether a variable name says its value is a secret: API_KEY, DB_PASSWORD,
// GITHUB_TOKEN, STRIPE_KEY; not SSH_AUTH_SOCK, TOKEN_TTL, PUBLIC_KEY or GOOGLE_CREDENTIALS_FILE.
func secretName(name string) bool {
	parts := strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool { return r == '_' || r == '-' || r == '.' })
	if len(parts) == 0 || notSecretLast[parts[len(parts)-1]] {
		return false
	}
	for _, p := range parts {
		if secretWords[p] {
			return true
		}
	}
	last := len(parts) - 1
	if !secretLastWords[parts[last]] || last == 0 {
		return false // a name that is only KEY or AUTH says too little
	}
	return parts[last] != "KEY" || !notSecretKeyQualifiers[parts[last-1]]
}

// highEntropy reports whether a value looks like a generated secret: long, one word of token
// characters, mixing character classes, and close to random.
func highEntropy(v string) bool {
	if len(v) < 20 || strings.HasPrefix(v, "/") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "~") {
		return false
	}
	var upper, lower, digit bool
	var counts [256]int
	for i := 0; i < len(v); i++ {
		b := v[i]
		switch {
		case b >= 'A' && b <= 'Z':
			upper = true
		case b >= 'a' && b <= 'z':
			lower = true
		case b >= '0' && b <= '9':
			digit = true
		case strings.IndexByte("+/=_-.", b) >= 0:
		default:
			return false
		}
		counts[b]++
	}
	classes := 0
	for _, c := range []bool{upper, lower, digit} {
		if c {
			classes++
		}
	}
	if classes < 2 || !digit {
		return false
	}
	var h float64
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / float64(len(v))
			h -= p * math.Log2(p)
		}
	}
	return h >= 3.5
}

// parseAssignment reads one dotenv line: KEY=value, export KEY="value" # comment. ok is false for
// blank lines, comments and anything else.
func parseAssignment(line string) (key, value string, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", "", false
	}
	line = strings.TrimPrefix(line, "export ")
	key, value, ok = strings.Cut(line, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" || strings.ContainsFunc(key, func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}) {
		return "", "", false
	}
	value = strings.TrimSpace(value)
	if value != "" && strings.ContainsAny(value[:1], `"'`+"`") {
		if end := strings.IndexByte(value[1:], value[0]); end >= 0 {
			value = value[1 : 1+end]
		} else {
			value = value[1:]
		}
	} else if c := strings.Index(value, " #"); c >= 0 {
		value = strings.TrimSpace(value[:c])
	}
	return key, value, true
}

// assignmentSecret judges one KEY=value that enters a process (a dotenv line, a passed variable): it
// is a secret when its value is not a placeholder and its name says so, or (with entropy set) when the
// value looks generated.
func assignmentSecret(key, value string, entropy bool) bool {
	switch strings.ToLower(value) {
	case "true", "false", "yes", "no", "on", "off":
		return false
	}
	if isPlaceholder(value) || strings.Contains(value, "://") {
		return false // a URL's credentials are the URL rule's to judge
	}
	return secretName(key) || entropy && highEntropy(value)
}

// matchDotenv reports the assignments of a dotenv file that hold secrets.
func matchDotenv(data []byte, emit emitFunc) {
	forLines(data, func(off int, line []byte) bool {
		key, value, ok := parseAssignment(string(line))
		if ok && assignmentSecret(key, value, true) {
			return emit(off, "secret in dotenv file", key+"=…")
		}
		return true
	})
}

// matchConfig reports the literal credentials in a configuration file with known credential keys.
func matchConfig(data []byte, r *configRule, emit emitFunc) {
	forLines(data, func(off int, line []byte) bool {
		l := strings.TrimSpace(string(line))
		l = strings.TrimPrefix(l, "- ")
		if l == "" || l[0] == '#' || l[0] == ';' {
			return true
		}
		seps := "=:"
		if r == npmrcRule {
			seps = "=" // its keys hold colons: //host/:_authToken
		}
		i := strings.IndexAny(l, seps)
		if i < 0 {
			return true
		}
		key := strings.ToLower(strings.Trim(l[:i], ` "'`))
		value := strings.Trim(strings.TrimSpace(l[i+1:]), `"',{}`)
		if !configKey(r, key) || isPlaceholder(value) {
			return true
		}
		return emit(off, r.kind, strings.Trim(l[:i], ` "'`)+"=…")
	})
}

func configKey(r *configRule, key string) bool {
	for _, k := range r.keys {
		if key == k {
			return true
		}
	}
	for _, s := range r.suffixes {
		if strings.HasSuffix(key, s) {
			return true
		}
	}
	return false
}

// matchGoogleJSON reports GCP credentials in JSON: a service-account key, or the refresh token of
// gcloud's application-default user credentials.
func matchGoogleJSON(data []byte, emit emitFunc) {
	if bytes.Contains(data, []byte(`"service_account"`)) {
		if k := bytes.Index(data, []byte(`"private_key"`)); k >= 0 &&
			bytes.HasPrefix(assignedValue(data[k+len(`"private_key"`):]), []byte("-----BEGIN")) &&
			!emit(k, "GCP service account key", "") {
			return
		}
	}
	if bytes.Contains(data, []byte(`"authorized_user"`)) {
		if k := bytes.Index(data, []byte(`"refresh_token"`)); k >= 0 &&
			!isPlaceholder(string(assignedValue(data[k+len(`"refresh_token"`):]))) {
			emit(k, "Google OAuth refresh token", "")
		}
	}
}

// forLines calls fn with each line of data and its offset, until fn returns false.
func forLines(data []byte, fn func(off int, line []byte) bool) {
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data) - off
		}
		if !fn(off, data[off:off+end]) {
			return
		}
		off += end + 1
	}
}
