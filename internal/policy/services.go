package policy

import (
	"fmt"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The services section: fixture servers (a database, a cache) that cordon starts outside the
// sandbox from the host's own binaries, seeds from the project's fixtures, and destroys with the run,
// so that the connection string an agent gets leads to data that belongs to nobody.

// Service is one fixture server, reachable inside as Name.ServiceDomain on its kind's port.
type Service struct {
	// Name is a DNS label; the sandbox reaches the server as Name.ServiceDomain.
	Name string
	// Kind is ServicePostgres, ServiceRedis or ServiceMysql.
	Kind string
	// Fixtures are workspace-relative files applied in order: SQL scripts for PostgreSQL (psql, as
	// the database's owner), command files for Redis (one command a line).
	Fixtures []string
	// Restore is a workspace-relative pg_dump archive restored (pg_restore) before Fixtures.
	Restore string
	// Database and User are PostgreSQL's database and its owner; both default to DefaultServiceDB.
	Database, User string
	// Env, when set, names the variable that carries the service's URL inside the sandbox.
	Env string
	// Line is where the service is defined in the policy file, for errors found when it starts.
	Line int
}

// The kinds of service, each keyed by its name in the file.
const (
	ServicePostgres = "postgres"
	ServiceRedis    = "redis"
	// ServiceMysql is MariaDB (or MySQL), from the host's mariadbd or mysqld.
	ServiceMysql = "mysql"
)

// ServiceDomain is the domain under which services are named inside the sandbox. Nothing under it
// is ever resolved or dialled outside: a name there is a service of the run or nothing.
const ServiceDomain = "cordon.internal"

// DefaultServiceDB is the database and role a postgres service gets unless the policy names others.
const DefaultServiceDB = "app"

func (d *decoder) services(n *yaml.Node, p string) ([]Service, error) {
	var out []Service
	err := d.pairs(n, p, func(k, v *yaml.Node, sp string) error {
		if !validServiceName(k.Value) {
			return d.errf(k, sp, "%q is not a valid service name (expected a DNS label: lower-case letters, digits and '-', up to 63, starting with a letter)", k.Value)
		}
		s, err := d.service(v, sp)
		if err != nil {
			return err
		}
		s.Name, s.Line = k.Value, k.Line
		out = append(out, s)
		return nil
	})
	return out, err
}

func (d *decoder) service(n *yaml.Node, p string) (s Service, err error) {
	kind := func(name string) field {
		return field{name, func(v *yaml.Node, kp string) error {
			if s.Kind != "" {
				return d.errf(v, kp, "a service is one server: %s is already given", s.Kind)
			}
			s.Kind = name
			return d.serviceKind(v, kp, &s)
		}}
	}
	_, err = d.mapping(n, p,
		kind(ServicePostgres),
		kind(ServiceRedis),
		kind(ServiceMysql),
		field{"env", func(v *yaml.Node, kp string) (err error) {
			s.Env, err = d.str(v, kp)
			if err == nil {
				if _, cerr := checkEnvName(s.Env); cerr != nil {
					err = d.errf(v, kp, "%v", cerr)
				}
			}
			return err
		}},
	)
	if err != nil {
		return s, err
	}
	if s.Kind == "" {
		return s, d.errf(n, p, "name the server: %s, %s or %s", ServicePostgres, ServiceRedis, ServiceMysql)
	}
	return s, nil
}

// serviceKind decodes the settings under the kind's key ({} for none).
func (d *decoder) serviceKind(n *yaml.Node, p string, s *Service) error {
	fixtures := field{"fixtures", func(v *yaml.Node, fp string) (err error) {
		s.Fixtures, err = d.strs(v, fp, checkFixture)
		return err
	}}
	var fields []field
	switch s.Kind {
	case ServicePostgres:
		s.Database, s.User = DefaultServiceDB, DefaultServiceDB
		fields = []field{fixtures,
			field{"restore", func(v *yaml.Node, fp string) error {
				r, err := d.str(v, fp)
				if err != nil {
					return err
				}
				if s.Restore, err = checkFixture(r); err != nil {
					return d.errf(v, fp, "%v", err)
				}
				return nil
			}},
			field{"database", func(v *yaml.Node, fp string) error { return d.sqlName(v, fp, &s.Database) }},
			field{"user", func(v *yaml.Node, fp string) error { return d.sqlName(v, fp, &s.User) }},
		}
	case ServiceMysql:
		s.Database, s.User = DefaultServiceDB, DefaultServiceDB
		fields = []field{fixtures,
			field{"database", func(v *yaml.Node, fp string) error { return d.mysqlName(v, fp, &s.Database) }},
			field{"user", func(v *yaml.Node, fp string) error { return d.mysqlName(v, fp, &s.User) }},
		}
	case ServiceRedis:
		fields = []field{fixtures}
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil // "postgres:" with nothing under it: the defaults
	}
	_, err := d.mapping(n, p, fields...)
	return err
}

// sqlName decodes a database or role name that needs no quoting in SQL or in a URL.
func (d *decoder) sqlName(n *yaml.Node, p string, dst *string) error {
	s, err := d.str(n, p)
	if err != nil {
		return err
	}
	ok := len(s) <= 63 && matchAll(s, func(c byte) bool { return isLower(c) || c == '_' },
		func(c byte) bool { return isLower(c) || isDigit(c) || c == '_' })
	if !ok || s == "postgres" || s == "cordon" || strings.HasPrefix(s, "pg_") {
		return d.errf(n, p, "%q: expected lower-case letters, digits and _ (up to 63, not starting with a digit), and not postgres, cordon or pg_*", s)
	}
	*dst = s
	return nil
}

// mysqlName is sqlName less the names MariaDB keeps for itself (its system schemas, its root).
func (d *decoder) mysqlName(n *yaml.Node, p string, dst *string) error {
	if err := d.sqlName(n, p, dst); err != nil {
		return err
	}
	switch *dst {
	case "mysql", "root", "sys", "information_schema", "performance_schema", "mariadb.sys":
		return d.errf(n, p, "%q is MariaDB's own; choose another name", *dst)
	}
	return nil
}

// checkFixture requires a path inside the project, relative to it: the fixtures come from the run's
// view of the project, never from elsewhere on the host.
func checkFixture(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("must not be empty")
	}
	clean := path.Clean(s)
	if path.IsAbs(s) || clean == ".." || strings.HasPrefix(clean, "../") || clean == "." {
		return "", fmt.Errorf("%q is outside the project (a fixture is a file in the workspace, given relative to it)", s)
	}
	return clean, nil
}

func validServiceName(s string) bool {
	return len(s) <= 63 && matchAll(s, isLower, func(c byte) bool { return isLower(c) || isDigit(c) || c == '-' }) &&
		!strings.HasSuffix(s, "-")
}

// checkServices refuses two services setting one variable, and a service's variable that env or a
// credential sets too: which value the agent got would be a guess.
func (d *decoder) checkServices(p *Policy, services *yaml.Node) error {
	owner := map[string]string{}
	for _, name := range p.Env.Pass {
		owner[name] = "env.pass"
	}
	for name := range p.Env.Set {
		owner[name] = "env.set"
	}
	for _, c := range p.Credentials {
		owner[c.Name] = "a credential"
	}
	for i, s := range p.Services {
		if s.Env == "" {
			continue
		}
		where := "services." + s.Name + ".env"
		if o, dup := owner[s.Env]; dup {
			return d.errf(valueOf(services.Content[2*i+1], "env"), where, "%s is also set by %s", s.Env, o)
		}
		owner[s.Env] = "services." + s.Name
	}
	return nil
}

// ServicePort is the port a kind of service answers on inside the sandbox: its protocol's usual one.
func ServicePort(kind string) uint16 {
	switch kind {
	case ServiceRedis:
		return 6379
	case ServiceMysql:
		return 3306
	}
	return 5432
}

// docService and docServiceKind mirror a service's schema for Render.
type docService struct {
	Postgres *docServiceKind `yaml:"postgres,omitempty"`
	Redis    *docServiceKind `yaml:"redis,omitempty"`
	Mysql    *docServiceKind `yaml:"mysql,omitempty"`
	Env      string          `yaml:"env,omitempty"`
}

type docServiceKind struct {
	Fixtures []string `yaml:"fixtures,omitempty"`
	Restore  string   `yaml:"restore,omitempty"`
	Database string   `yaml:"database,omitempty"`
	User     string   `yaml:"user,omitempty"`
}

// docServices renders the services as a mapping in the policy's order (a Go map would sort them).
func docServices(services []Service) *yaml.Node {
	if len(services) == 0 {
		return nil
	}
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, s := range services {
		k := &docServiceKind{Fixtures: s.Fixtures, Restore: s.Restore, Database: s.Database, User: s.User}
		ds := docService{Env: s.Env}
		switch s.Kind {
		case ServiceRedis:
			ds.Redis = k
		case ServiceMysql:
			ds.Mysql = k
		default:
			ds.Postgres = k
		}
		var v yaml.Node
		if err := v.Encode(ds); err != nil {
			continue // plain strings and lists: cannot fail
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: s.Name}, &v)
	}
	return n
}
