package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseServices(t *testing.T) {
	src := `version: 1
services:
  db:
    postgres:
      fixtures: [db/schema.sql, ./db/seed.sql]
      restore: fixtures/masked.dump
      database: shop
    env: DATABASE_URL
  cache:
    redis: {}
    env: REDIS_URL
  plain:
    postgres:
  my:
    mysql: {fixtures: [db/mysql.sql], database: shop, user: clerk}
    env: MYSQL_URL
`
	p, err := Parse("p.yaml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := []Service{
		{Name: "db", Kind: ServicePostgres, Fixtures: []string{"db/schema.sql", "db/seed.sql"}, Restore: "fixtures/masked.dump",
			Database: "shop", User: "app", Env: "DATABASE_URL", Line: 3},
		{Name: "cache", Kind: ServiceRedis, Env: "REDIS_URL", Line: 9},
		{Name: "plain", Kind: ServicePostgres, Database: "app", User: "app", Line: 12},
		{Name: "my", Kind: ServiceMysql, Fixtures: []string{"db/mysql.sql"}, Database: "shop", User: "clerk", Env: "MYSQL_URL", Line: 14},
	}
	if !reflect.DeepEqual(p.Services, want) {
		t.Fatalf("services\n got %+v\nwant %+v", p.Services, want)
	}
	out, err := p.Render()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("rendered", out, testOpts)
	if err != nil {
		t.Fatalf("rendered services do not parse: %v\n%s", err, out)
	}
	for i := range back.Services {
		back.Services[i].Line = want[i].Line // positions are the file's
	}
	if !reflect.DeepEqual(back.Services, want) {
		t.Errorf("round trip changed the services\n got %+v\nwant %+v\n%s", back.Services, want, out)
	}
}

func TestParseServicesErrors(t *testing.T) {
	tests := []struct{ name, services, want string }{
		{"unknown kind", "  db:\n    mongo: {}\n", "4:5: services.db.mongo: unknown field (expected one of postgres, redis, mysql, env)"},
		{"mysql restore", "  db:\n    mysql: {restore: x.dump}\n", "4:13: services.db.mysql.restore: unknown field (expected one of fixtures, database, user)"},
		{"mysql root", "  db:\n    mysql: {user: root}\n", `4:19: services.db.mysql.user: "root" is MariaDB's own`},
		{"mysql schema", "  db:\n    mysql: {database: mysql}\n", `services.db.mysql.database: "mysql" is MariaDB's own`},
		{"no kind", "  db:\n    env: X\n", "4:5: services.db: name the server: postgres, redis or mysql"},
		{"two kinds", "  db:\n    postgres: {}\n    redis: {}\n", "5:12: services.db.redis: a service is one server: postgres is already given"},
		{"outside", "  db:\n    postgres: {fixtures: [../secret.sql]}\n", `4:27: services.db.postgres.fixtures[0]: "../secret.sql" is outside the project`},
		{"absolute", "  db:\n    postgres: {fixtures: [/etc/passwd]}\n", `services.db.postgres.fixtures[0]: "/etc/passwd" is outside the project`},
		{"restore outside", "  db:\n    postgres: {restore: a/../../x.dump}\n", `4:25: services.db.postgres.restore: "a/../../x.dump" is outside the project`},
		{"bad name", "  DB:\n    redis: {}\n", `3:3: services.DB: "DB" is not a valid service name`},
		{"bad database", "  db:\n    postgres: {database: \"x; drop\"}\n", `services.db.postgres.database: "x; drop": expected lower-case letters`},
		{"superuser name", "  db:\n    postgres: {user: postgres}\n", `services.db.postgres.user: "postgres"`},
		{"redis restore", "  c:\n    redis: {restore: x}\n", "4:13: services.c.redis.restore: unknown field (expected one of fixtures)"},
		{"bad env", "  db:\n    redis: {}\n    env: 1X\n", `5:10: services.db.env: "1X" is not a valid variable name`},
		{"env twice", "  a:\n    redis: {}\n    env: U\n  b:\n    redis: {}\n    env: U\n", "8:10: services.b.env: U is also set by services.a"},
		{"env set too", "  a:\n    redis: {}\n    env: HOME_URL\n", "5:10: services.a.env: HOME_URL is also set by env.set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "version: 1\nservices:\n" + tt.services + "env:\n  set: {HOME_URL: x}\n"
			_, err := Parse("p.yaml", []byte(src), testOpts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
