package scan

import (
	"bytes"
	"net/netip"
	"strings"
)

// dbSchemes are the URL schemes of databases and brokers whose URLs carry a password.
var dbSchemes = map[string]bool{
	"postgres": true, "postgresql": true, "mysql": true, "mariadb": true, "mongodb": true,
	"mongodb+srv": true, "redis": true, "rediss": true, "amqp": true, "amqps": true, "mssql": true,
	"sqlserver": true, "clickhouse": true, "cockroachdb": true, "couchdb": true, "neo4j": true,
	"neo4j+s": true, "bolt": true, "cassandra": true, "nats": true, "kafka": true, "memcached": true,
}

// matchURL matches, at the "://" at data[i], a URL with a password for a host that is not local: a
// database URL, or any URL in a git config (where https://user:token@host is a stored credential).
func matchURL(data []byte, i int, anyScheme bool) (kind, preview string) {
	if i+3 > len(data) || data[i+1] != '/' || data[i+2] != '/' {
		return "", ""
	}
	s := i
	for s > 0 && (isAlnum(data[s-1]) || data[s-1] == '+' || data[s-1] == '.' || data[s-1] == '-') {
		s--
	}
	if s == i || !anyScheme && !dbSchemes[string(bytes.ToLower(data[s:i]))] {
		return "", ""
	}
	scheme := strings.ToLower(string(data[s:i]))
	user, host, ok := urlCredential(data[i+3:])
	if !ok {
		return "", ""
	}
	host = display(host)
	kind = "database URL to " + host
	if !dbSchemes[scheme] {
		kind = "URL with credentials for " + host
	}
	if len(user) > 16 || highEntropy(user) {
		user = user[:4] + "…" // a token in the user's place (https://TOKEN:x-oauth-basic@host)
	}
	return kind, display(scheme + "://" + user + ":…@" + host)
}

// urlCredential reads the authority of a URL (what follows "://") and returns the user and the first
// host that is not local, when the authority holds a password that is not a placeholder.
func urlCredential(b []byte) (user, host string, ok bool) {
	end := bytes.IndexFunc(b, func(r rune) bool {
		return r <= ' ' || strings.ContainsRune("/?#\"'`<>\\(){}", r)
	})
	if end < 0 {
		end = len(b)
	}
	auth := b[:end]
	at := bytes.LastIndexByte(auth, '@')
	if at < 0 {
		return "", "", false
	}
	u, pass, found := strings.Cut(string(auth[:at]), ":")
	if !found || isPlaceholder(pass) {
		return "", "", false
	}
	for _, h := range strings.Split(string(auth[at+1:]), ",") {
		h = hostOnly(h)
		if h != "" && !localHost(h) {
			return u, h, true
		}
	}
	return "", "", false
}

// hostOnly strips the port (and an IPv6 address's brackets) from host[:port].
func hostOnly(h string) string {
	if strings.HasPrefix(h, "[") {
		if end := strings.IndexByte(h, ']'); end > 0 {
			return h[1:end]
		}
		return ""
	}
	if c := strings.LastIndexByte(h, ':'); c >= 0 {
		h = h[:c]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// localHost reports whether a database host is on the developer's machine or a documentation name,
// so that a password for it is not a production credential: see the package documentation.
func localHost(h string) bool {
	if addr, err := netip.ParseAddr(h); err == nil {
		return addr.IsLoopback() || addr.IsUnspecified()
	}
	switch {
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return true
	case h == "host.docker.internal":
		return true
	case strings.HasSuffix(h, ".local"):
		return !strings.HasSuffix(h, ".cluster.local")
	case !strings.Contains(h, "."):
		return true // a docker-compose service or a host in the local search domain
	}
	for _, doc := range []string{"example.com", "example.net", "example.org"} {
		if h == doc || strings.HasSuffix(h, "."+doc) {
			return true
		}
	}
	return false
}
