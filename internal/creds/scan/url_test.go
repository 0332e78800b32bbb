package scan

import (
	"testing"
)

// TestConnectionStrings judges each form of connection string in a .env line: masked when it carries
// a literal password for anything but loopback or the sandbox's services, whatever the password looks
// like; left alone only when the password is plainly a template.
func TestConnectionStrings(t *testing.T) {
	tests := []struct {
		url    string
		want   string // the finding's kind, "" when nothing is found
		reason string
	}{
		// From the issue: each reached the agent unmasked.
		{"postgres://u:" + "p@prod.example.com/db", "database URL to prod.example.com", "a one-letter password is a password; a reserved domain in a real file is a renamed host"},
		{"postgres://admin:" + "password@10.0.0.5/app", "database URL to 10.0.0.5", "a private address is where production databases live; 'password' is a real password"},
		// Hosts.
		{"postgresql://app:" + "changeme@db:5432/app", "database URL to db", "a bare name may resolve in a company's search domain"},
		{"redis://:" + "hunter2@nas.local:6379", "database URL to nas.local", "*.local is any machine on the LAN"},
		{"mysql://root:" + "pw@host.docker.internal/x", "database URL to host.docker.internal", "the host's services are outside the sandbox"},
		{"mongodb://u:" + "pw@localhost:27017,db2.corp.io:27017/x", "database URL to db2.corp.io", "one remote host in a replica set is enough"},
		{"postgres://u:" + "pw@[2001:db8::5]:5432/x", "database URL to 2001:db8::5", "an IPv6 address"},
		{"postgres://u:" + "pw@/db", "database URL to (no host)", "no host: the environment picks one"},
		{"postgres://u:" + "pw@localhost:5432/x", "", "loopback"},
		{"postgres://u:" + "pw@api.localhost/x", "", "*.localhost is loopback (RFC 6761)"},
		{"mysql://root:" + "pw@127.0.0.5/x", "", "127/8 is loopback"},
		{"postgres://u:" + "pw@[::1]/x", "", "IPv6 loopback, bracket kept"},
		{"postgres://u:" + "pw@[::ffff:127.0.0.1]/x", "", "IPv4-mapped loopback"},
		{"postgres://u:" + "pw@0.0.0.0/x", "", "the unspecified address reaches the local host"},
		{"postgres://u:" + "pw@db.cordon.internal:5432/x", "", "the sandbox's own service"},
		// Schemes.
		{"mariadb://u:" + "pw@db.corp.io/x", "database URL to db.corp.io", "mariadb"},
		{"mongodb+srv://u:" + "pw@cluster0.ab12c.mongodb.net/db", "database URL to cluster0.ab12c.mongodb.net", "mongodb+srv"},
		{"rediss://default:" + "pw@cache.corp.io:6380", "database URL to cache.corp.io", "rediss"},
		{"amqps://u:" + "pw@mq.corp.io/vhost", "database URL to mq.corp.io", "amqps"},
		{"sqlserver://sa:" + "pw@sql.corp.io?database=x", "database URL to sql.corp.io", "sqlserver"},
		{"mssql://sa:" + "pw@sql.corp.io:1433/x", "database URL to sql.corp.io", "mssql"},
		{"jdbc:postgresql://u:" + "pw@db.corp.io/x", "database URL to db.corp.io", "JDBC with user information"},
		{"jdbc:mysql://db.corp.io:3306/x?user=u&" + "password=pw", "database URL to db.corp.io", "JDBC password parameter"},
		{"jdbc:sqlserver://sql.corp.io:1433;databaseName=x;user=sa;" + "password=pw", "database URL to sql.corp.io", "JDBC properties"},
		{"postgres://db.corp.io/x?sslmode=require&" + "password=pw", "database URL to db.corp.io", "libpq password parameter"},
		{"jdbc:oracle:thin:scott/" + "tiger@db.corp.io:1521:orcl", "database URL to db.corp.io", "Oracle thin, SID form"},
		{"jdbc:oracle:thin:scott/" + "tiger@//db.corp.io:1521/svc", "database URL to db.corp.io", "Oracle thin, service form"},
		{"jdbc:oracle:thin:scott/" + "tiger@localhost:1521:orcl", "", "Oracle thin, loopback"},
		{"jdbc:oracle:thin:scott/" + "${PW}@db.corp.io:1521:orcl", "", "Oracle thin, template"},
		{"https://user:" + "pw@git.corp.io/x", "URL with credentials for git.corp.io", "any scheme's password is a credential"},
		{"ftp://u:" + "pw@files.corp.io/", "URL with credentials for files.corp.io", "generic scheme"},
		{"https://files.corp.io/x?" + "password=pw", "", "a query parameter of an arbitrary URL is the server's business"},
		// Passwords: only plain templates are not literal.
		{"postgres://app:" + "${DB_PASSWORD}@db.corp.io/x", "", "${VAR}"},
		{"postgres://app:" + "$DB_PASSWORD@db.corp.io/x", "", "$VAR"},
		{"postgres://app:" + "<password>@db.corp.io/x", "", "<password>"},
		{"postgres://app:" + "%(password)s@db.corp.io/x", "", "%(x)s"},
		{"postgres://app:" + "%s@db.corp.io/x", "", "%s"},
		{"postgres://app:" + "***@db.corp.io/x", "", "a redaction mark"},
		{"postgres://app:" + "…@db.corp.io/x", "", "cordon's own redacted preview"},
		{"postgres://app:" + "@db.corp.io/x", "", "empty"},
		{"jdbc:mysql://db.corp.io/x?user=u&" + "password=${PW}", "", "a template parameter"},
		{"postgres://app:" + "xxxx@db.corp.io/x", "database URL to db.corp.io", "xxxx may be a password"},
		{"postgres://app:" + "$3cret@db.corp.io/x", "database URL to db.corp.io", "'$' then a digit is no variable"},
		{"postgres://app:" + "ab/cd+ef==@db.corp.io/x", "database URL to db.corp.io", "an unencoded '/' of a base64 password"},
		{"postgres://app:" + "p@ss@db.corp.io/x", "database URL to db.corp.io", "an unencoded '@' in the password"},
		{"postgres:/" + "/me@corp.io:pw@db.corp.io/x", "database URL to db.corp.io", "an unencoded '@' in the user"},
		// Not user information.
		{"postgres:/" + "/app@db.corp.io/x", "", "no password"},
		{"postgres:/" + "/db.corp.io:5432/x", "", "no user information"},
		{"https://mastodon.corp.io:" + "8080/@name", "", "a port and a path with '@'"},
		{"https:/" + "/mastodon.corp.io/@name:x", "", "a path with '@'"},
		{"postgres://u:" + "pw@localhost/db?x=a@b.corp.io", "", "an '@' in the query of a local URL"},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			got := judge(".env", classify(".env"), []byte("DATABASE_URL="+tt.url+"\n"))
			var kind string
			if len(got) > 0 {
				kind = got[0].Kind
			}
			if kind != tt.want {
				t.Errorf("%s: found %q, want %q", tt.url, kind, tt.want)
			}
		})
	}
}

// TestConnectionStringsInAnyFile checks that the URL rule is a content rule: the same line in a
// source file, quoted or in Markdown, is found with its host read correctly.
func TestConnectionStringsInAnyFile(t *testing.T) {
	tests := []struct{ file, content, want string }{
		{"config.go", "dsn := \"postgres://admin:" + "password@10.0.0.5/app\"", "database URL to 10.0.0.5"},
		{"README.md", "see [the db](postgres://u:" + "pw@db.corp.io)", "database URL to db.corp.io"},
		{"README.md", "see (postgres://u:" + "pw@localhost)", ""},
		{"app.yaml", "url: 'jdbc:postgresql://db.corp.io:5432/x?" + "password=pw'", "database URL to db.corp.io"},
	}
	for _, tt := range tests {
		got := judge(tt.file, classify(tt.file), []byte(tt.content))
		var kind string
		if len(got) > 0 {
			kind = got[0].Kind
		}
		if kind != tt.want {
			t.Errorf("%s: %s: found %q, want %q", tt.file, tt.content, kind, tt.want)
		}
	}
}
