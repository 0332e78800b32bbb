package scan

import (
	"bytes"
	"net/netip"
	"strings"
)

// dbSchemes are the URL schemes of databases and brokers whose URLs carry a password, in the
// authority (user:pass@host) or, for these, in a parameter (?password=..., ;password=...).
var dbSchemes = map[string]bool{
	"postgres": true, "postgresql": true, "mysql": true, "mariadb": true, "mongodb": true,
	"mongodb+srv": true, "redis": true, "rediss": true, "amqp": true, "amqps": true, "mssql": true,
	"sqlserver": true, "oracle": true, "db2": true, "clickhouse": true, "cockroachdb": true, "couchdb": true,
	"neo4j": true, "neo4j+s": true, "bolt": true, "cassandra": true, "nats": true, "kafka": true,
	"memcached": true, "snowflake": true,
}

// matchURL matches, at the "://" at data[i], a connection string holding a literal password for a
// host other than loopback or the sandbox's own services: user:pass@host after any scheme (a URL's
// password is a credential whatever the protocol), and a password parameter for a database scheme
// or a JDBC URL (jdbc:sqlserver, then the host and ;password=...).
func matchURL(data []byte, i int) (kind, preview string) {
	if i+3 > len(data) || data[i+1] != '/' || data[i+2] != '/' {
		return "", ""
	}
	s := i
	for s > 0 && (isAlnum(data[s-1]) || data[s-1] == '+' || data[s-1] == '.' || data[s-1] == '-') {
		s--
	}
	if s == i || !isAlpha(data[s]) {
		return "", ""
	}
	scheme := strings.ToLower(string(data[s:i]))
	jdbc := s >= 5 && strings.EqualFold(string(data[s-5:s]), "jdbc:")
	user, host, ok := urlCredential(data[i+3:], jdbc || dbSchemes[scheme])
	if !ok {
		return "", ""
	}
	host = display(host)
	kind = "database URL to " + host
	if !dbSchemes[scheme] && !jdbc {
		kind = "URL with credentials for " + host
	}
	if jdbc {
		scheme = "jdbc:" + scheme
	}
	if len(user) > 16 || highEntropy(user) {
		user = user[:4] + "…" // a token in the user's place (TOKEN:x-oauth-basic@ in a git remote)
	}
	return kind, display(scheme + "://" + user + ":…@" + host)
}

// matchOracleThin matches, at the last ':' of "jdbc:oracle:thin:", Oracle's JDBC form that is no URL:
// user/password@host:port:sid or user/password@//host:port/service.
func matchOracleThin(data []byte, i int) (kind, preview string) {
	const prefix = "jdbc:oracle:thin"
	if i < len(prefix) || data[i-1]|0x20 != 'n' || !hasPrefixFold(data[i-len(prefix):], prefix) {
		return "", ""
	}
	rest := data[i+1:]
	end := bytes.IndexFunc(rest, func(r rune) bool { return r <= ' ' || strings.ContainsRune("\"'`\\", r) })
	if end < 0 {
		end = len(rest)
	}
	creds, hosts, ok := strings.Cut(string(rest[:end]), "@")
	user, pass, found := strings.Cut(creds, "/")
	if !ok || !found || urlTemplate(pass) {
		return "", ""
	}
	hosts = strings.TrimPrefix(hosts, "//")
	if e := strings.IndexAny(hosts, ":/?"); e >= 0 {
		hosts = hosts[:e]
	}
	if h := hostOnly(hosts); !localHost(h) {
		return "database URL to " + display(h), display(prefix + ":" + user + "/…@" + h)
	}
	return "", ""
}

// urlCredential reads what follows a URL's "://" and returns the user and the first host that is not
// local, when the URL holds a password that is not a template: in the user information, or (with
// params set) in a password parameter.
func urlCredential(b []byte, params bool) (user, host string, ok bool) {
	end := bytes.IndexFunc(b, func(r rune) bool { return r <= ' ' || strings.ContainsRune("\"'`\\", r) })
	if end < 0 {
		end = len(b)
	}
	url := string(b[:end])
	hosts := url
	user, pass, found := userInfo(url)
	if found {
		hosts = url[len(user)+1+len(pass)+1:]
	}
	if !found || urlTemplate(pass) {
		if !params {
			return "", "", false
		}
		if pass, found = passwordParam(url); !found || urlTemplate(pass) {
			return "", "", false
		}
		user = ""
	}
	if e := strings.IndexAny(hosts, "/?#;"); e >= 0 {
		hosts = hosts[:e]
	}
	hosts = strings.TrimRight(hosts, ")}>,.") // the URL ends inside brackets: (postgres://...)
	if !strings.Contains(hosts, "[") {
		hosts = strings.TrimRight(hosts, "]") // a bracket around the URL, not an IPv6 address's
	}
	for _, h := range strings.Split(hosts, ",") {
		if h = hostOnly(h); !localHost(h) {
			if h == "" {
				h = "(no host)" // the environment names it (PGHOST, a socket): not known to be local
			}
			return user, h, true
		}
	}
	return "", "", false
}

// userInfo splits "user:pass@" off the start of a URL's remainder. A password may hold '@' or '/'
// (unencoded, as people write them), so the last '@' that can end user information counts; one
// after a path ("host:8080/@name", "host/x@y") cannot.
func userInfo(url string) (user, pass string, ok bool) {
	for at := 0; at < len(url); at++ {
		if url[at] != '@' {
			continue
		}
		u, p, found := strings.Cut(url[:at], ":")
		if !found || strings.ContainsAny(u, "/?#") || portThenPath(p) {
			continue
		}
		if k := strings.IndexByte(p, '@'); k >= 0 && strings.ContainsAny(p[k:], "/?#") {
			break // a later '@' is in the path or the query of a URL already read
		}
		user, pass, ok = u, p, true
	}
	return user, pass, ok
}

// portThenPath reports whether what follows "host:" is a port and a path, not a password.
func portThenPath(p string) bool {
	n := runLen([]byte(p), func(b byte) bool { return b >= '0' && b <= '9' })
	return n > 0 && n < len(p) && strings.IndexByte("/?#", p[n]) >= 0
}

// passwordParam returns the value of a password parameter in a URL's query (?a=b&password=c) or in
// JDBC's properties (;user=a;password=b).
func passwordParam(url string) (string, bool) {
	i := strings.IndexAny(url, "?;")
	if i < 0 {
		return "", false
	}
	for _, kv := range strings.FieldsFunc(url[i+1:], func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "password", "pwd", "pass", "passwd":
			return v, true
		}
	}
	return "", false
}

// urlTemplate reports whether a URL's password is plainly not a literal one: empty, a reference that
// a shell, a template engine or a format string fills in ($VAR, ${VAR}, $(cmd), <password>, {{ .X }},
// %(x)s, %s), or a redaction mark (***, cordon's own "…"). Anything else is masked, however short or
// guessable: "password" and "changeme" are real passwords of real databases more often than one would
// hope, and a password that is a placeholder in one file is a credential in the next.
func urlTemplate(p string) bool {
	switch {
	case p == "", p == "%s", p == "%v", p == "%q", strings.HasPrefix(p, "%("):
		return true
	case p[0] == '$' && len(p) > 1 && (isAlpha(p[1]) || strings.IndexByte("_{(", p[1]) >= 0):
		return true
	case p[0] == '<' && strings.HasSuffix(p, ">"), strings.Contains(p, "{{"), strings.Contains(p, "${"):
		return true
	case strings.Trim(p, "*") == "", strings.Trim(p, "…") == "":
		return true
	}
	return false
}

// hostOnly strips the port (and an IPv6 address's brackets) from host[:port].
func hostOnly(h string) string {
	if strings.HasPrefix(h, "[") {
		if end := strings.IndexByte(h, ']'); end > 0 {
			return strings.ToLower(h[1:end])
		}
		return strings.ToLower(h[1:]) // unclosed: the URL was cut
	}
	if c := strings.LastIndexByte(h, ':'); c >= 0 {
		h = h[:c]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// localHost reports whether a host is the machine the connection starts from, so that its password
// cannot open anything beyond it: loopback (localhost and *.localhost resolve there by RFC 6761),
// the unspecified address (a connection to it reaches the local host), or the sandbox's own services
// (*.cordon.internal). Nothing else is: a private address is where production databases live, a bare
// name may be found in a company's search domain, *.local is any machine on the LAN, and a reserved
// documentation domain in a real file is a real host that someone renamed by hand.
func localHost(h string) bool {
	if addr, err := netip.ParseAddr(h); err == nil {
		addr = addr.Unmap()
		return addr.IsLoopback() || addr.IsUnspecified()
	}
	return h == "localhost" || strings.HasSuffix(h, ".localhost") ||
		h == "cordon.internal" || strings.HasSuffix(h, ".cordon.internal")
}

func isAlpha(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
