package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The credentials section: real secrets the agent only sees as placeholders, where each comes from,
// and where the gateway puts it.

// Credential is a secret the agent may use but never see: inside it is a placeholder in the variable
// Name, replaced with the real value only on requests to the hosts in Inject.
type Credential struct {
	Name   string
	From   Source
	Inject Inject
}

// Source says where a credential's real value comes from. Exactly one field is set.
type Source struct {
	// Env names a variable of cordon's own environment.
	Env string
	// File is an absolute path whose contents (trimmed) are the value.
	File string
	// Command is a program and its arguments whose standard output (trimmed) is the value.
	Command []string
	// GitHubApp mints a short-lived, repository-scoped installation token.
	GitHubApp *GitHubApp
	// AWS is an AWS access key pair (and session token, if any); the agent gets placeholder keys and the
	// gateway re-signs its requests.
	AWS *AWS
	// SSHAgent gives the sandbox an ssh-agent socket (its path in the variable Name) that relays to
	// the caller's agent (SSH_AUTH_SOCK) only list and sign requests for the keys it names. It has
	// no inject: ssh inside uses it.
	SSHAgent *SSHAgent
}

// SSHAgent names the keys of the caller's ssh-agent the sandbox may use.
type SSHAgent struct {
	// Keys are SHA256 fingerprints ("SHA256:…", as ssh-add -l prints them) or key comments.
	Keys []string
}

// AWS says where an AWS key pair comes from. Exactly one field is set.
type AWS struct {
	// Profile names a profile of the AWS shared credentials file ($AWS_SHARED_CREDENTIALS_FILE, else
	// ~/.aws/credentials).
	Profile string
	// Env takes AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from cordon's environment.
	Env bool
	// AssumeRole, if set, trades those keys for a role's session keys before the run starts: the agent's
	// requests are then signed with keys that expire on their own and can do only what the role (and
	// the session policy) allow.
	AssumeRole *AssumeRole
}

// AssumeRole is an STS AssumeRole call: the role, an optional session policy narrowing it, and how
// long the session's keys last.
type AssumeRole struct {
	// RoleARN is the role (arn:aws:iam::ACCOUNT:role/NAME).
	RoleARN string
	// SessionPolicy is an IAM policy document (JSON); the session can do only what both it and the
	// role allow.
	SessionPolicy string
	// Duration is the session's lifetime, 15m to 12h; zero means 1h.
	Duration time.Duration
	// Endpoint is the STS endpoint URL; empty means the global one. Region is the region it signs
	// for; empty means us-east-1.
	Endpoint, Region string
}

// Kind names the source's form as it is spelled in the policy file.
func (s Source) Kind() string {
	switch {
	case s.Env != "":
		return "env"
	case s.File != "":
		return "file"
	case len(s.Command) > 0:
		return "command"
	case s.GitHubApp != nil:
		return "githubApp"
	case s.AWS != nil:
		return "aws"
	case s.SSHAgent != nil:
		return "sshAgent"
	}
	return ""
}

// GitHubApp identifies a GitHub App installation and the narrow token to mint from it.
type GitHubApp struct {
	AppID          int64
	PrivateKeyFile string
	// InstallationID is the app's installation on the repositories' owner.
	InstallationID int64
	// Repositories ("owner/name") the token is limited to.
	Repositories []string
	// Permissions maps a GitHub permission name to read, write or admin.
	Permissions map[string]string
	// APIURL is the GitHub API base URL; empty means https://api.github.com.
	APIURL string
}

// Scheme is how a credential is presented in the Authorization header.
type Scheme string

// The schemes a credential can be injected with.
const (
	SchemeBearer Scheme = "bearer"
	SchemeBasic  Scheme = "basic"
)

// Inject says where the gateway puts a credential's real value. Header and Scheme are exclusive.
type Inject struct {
	// Hosts are the host names or "*.domain" patterns (subdomains only) the credential is bound to.
	Hosts []string
	// Header is a header whose value is the credential as is.
	Header string
	// Scheme puts the credential in the Authorization header with this scheme.
	Scheme Scheme
	// Body also replaces the placeholder in request bodies.
	Body bool
	// Ranges allows the value into requests with Range or If-Range, refused otherwise: a host that
	// echoes the request would hand the value back in pieces that redaction cannot recognise.
	Ranges bool
}

// NeedsPlacement reports whether the source's kind needs Header, Scheme or Body to say where the value
// goes: an AWS key pair is never sent as such, it signs requests.
func (s Source) NeedsPlacement() bool { return s.AWS == nil }

func (d *decoder) credentials(n *yaml.Node, path string) ([]Credential, error) {
	var out []Credential
	first := map[string]int{}
	err := d.list(n, path, func(item *yaml.Node, ip string) error {
		c, err := d.credential(item, ip)
		if err != nil {
			return err
		}
		if line, dup := first[c.Name]; dup {
			return d.errf(valueOf(item, "name"), ip+".name", "credential %s is already defined at line %d", c.Name, line)
		}
		first[c.Name] = valueOf(item, "name").Line
		out = append(out, c)
		return nil
	})
	return out, err
}

func (d *decoder) credential(n *yaml.Node, path string) (c Credential, err error) {
	seen, err := d.mapping(n, path,
		field{"name", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if c.Name, err = checkEnvName(s); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
		field{"from", func(v *yaml.Node, p string) (err error) {
			c.From, err = d.source(v, p)
			return err
		}},
		field{"inject", func(v *yaml.Node, p string) error {
			// Read after from, wherever it is written: what inject needs depends on the source.
			return nil
		}},
	)
	if err != nil {
		return c, err
	}
	if c.From.SSHAgent != nil {
		// ssh inside speaks to the agent; there is nothing for the gateway to put anywhere.
		if seen["inject"] != nil {
			return c, d.errf(seen["inject"], path+".inject", "an sshAgent credential has no inject: ssh inside uses its socket")
		}
		return c, d.require(n, path, seen, "name", "from")
	}
	if err := d.require(n, path, seen, "name", "from", "inject"); err != nil {
		return c, err
	}
	c.Inject, err = d.inject(seen["inject"], path+".inject", c.From.NeedsPlacement())
	return c, err
}

func (d *decoder) source(n *yaml.Node, path string) (s Source, err error) {
	kinds := []string{"env", "file", "command", "githubApp", "aws", "sshAgent"}
	seen, err := d.mapping(n, path,
		field{"env", func(v *yaml.Node, p string) error {
			name, err := d.str(v, p)
			if err != nil {
				return err
			}
			if s.Env, err = checkEnvName(name); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
		field{"file", func(v *yaml.Node, p string) (err error) {
			s.File, err = d.path(v, p)
			return err
		}},
		field{"command", func(v *yaml.Node, p string) error {
			err := d.list(v, p, func(v *yaml.Node, p string) error {
				arg, err := d.str(v, p)
				s.Command = append(s.Command, arg)
				return err
			})
			if err == nil && (len(s.Command) == 0 || s.Command[0] == "") {
				return d.errf(v, p, "expected a program and its arguments, e.g. [gh, auth, token]")
			}
			return err
		}},
		field{"githubApp", func(v *yaml.Node, p string) (err error) {
			s.GitHubApp, err = d.githubApp(v, p)
			return err
		}},
		field{"aws", func(v *yaml.Node, p string) (err error) {
			s.AWS, err = d.aws(v, p)
			return err
		}},
		field{"sshAgent", func(v *yaml.Node, p string) (err error) {
			s.SSHAgent, err = d.sshAgent(v, p)
			return err
		}},
	)
	if err != nil {
		return s, err
	}
	var got []string
	for _, k := range kinds {
		if seen[k] != nil {
			got = append(got, k)
		}
	}
	if len(got) != 1 {
		msg := "set exactly one of " + strings.Join(kinds, ", ")
		if len(got) > 1 {
			msg += " (found " + strings.Join(got, " and ") + ")"
		}
		return s, d.errf(n, path, "%s", msg)
	}
	return s, nil
}

func (d *decoder) githubApp(n *yaml.Node, path string) (*GitHubApp, error) {
	g := &GitHubApp{}
	seen, err := d.mapping(n, path,
		field{"appId", func(v *yaml.Node, p string) (err error) {
			g.AppID, err = d.integer(v, p, 1, math.MaxInt64)
			return err
		}},
		field{"privateKeyFile", func(v *yaml.Node, p string) (err error) {
			g.PrivateKeyFile, err = d.path(v, p)
			return err
		}},
		field{"installationId", func(v *yaml.Node, p string) (err error) {
			g.InstallationID, err = d.integer(v, p, 1, math.MaxInt64)
			return err
		}},
		field{"repositories", func(v *yaml.Node, p string) (err error) {
			g.Repositories, err = d.strs(v, p, checkRepository)
			if err == nil && len(g.Repositories) == 0 {
				return d.errf(v, p, "expected at least one repository (owner/name)")
			}
			return err
		}},
		field{"permissions", func(v *yaml.Node, p string) error {
			err := d.pairs(v, p, func(k, val *yaml.Node, kp string) error {
				if !validPermission(k.Value) {
					return d.errf(k, kp, "%q is not a GitHub permission name (expected e.g. contents, pull_requests)", k.Value)
				}
				level, err := d.str(val, kp)
				if err != nil {
					return err
				}
				if level != "read" && level != "write" && level != "admin" {
					return d.errf(val, kp, "%q is not an access level (expected read, write or admin)", level)
				}
				if g.Permissions == nil {
					g.Permissions = make(map[string]string)
				}
				g.Permissions[k.Value] = level
				return nil
			})
			if err == nil && len(g.Permissions) == 0 {
				return d.errf(v, p, "expected at least one permission, e.g. {contents: read}")
			}
			return err
		}},
		field{"apiURL", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if g.APIURL, err = checkAPIURL(s); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
	)
	if err != nil {
		return nil, err
	}
	// A token with every permission of the installation on every repository is what this is for
	// avoiding, so repositories and permissions are required.
	return g, d.require(n, path, seen, "appId", "privateKeyFile", "installationId", "repositories", "permissions")
}

func (d *decoder) aws(n *yaml.Node, path string) (*AWS, error) {
	a := &AWS{}
	seen, err := d.mapping(n, path,
		field{"profile", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err == nil && (s == "" || strings.ContainsAny(s, "[]\n\r")) {
				err = d.errf(v, p, "%q is not a profile name", s)
			}
			a.Profile = s
			return err
		}},
		field{"env", func(v *yaml.Node, p string) (err error) {
			a.Env, err = d.boolean(v, p)
			if err == nil && !a.Env {
				err = d.errf(v, p, "env: false takes nothing from anywhere (set env: true or a profile)")
			}
			return err
		}},
		field{"assumeRole", func(v *yaml.Node, p string) (err error) {
			a.AssumeRole, err = d.assumeRole(v, p)
			return err
		}},
	)
	if err == nil && (seen["profile"] == nil) == (seen["env"] == nil) {
		err = d.errf(n, path, "set exactly one of profile (the AWS shared credentials file) or env: true")
	}
	return a, err
}

func (d *decoder) sshAgent(n *yaml.Node, path string) (*SSHAgent, error) {
	a := &SSHAgent{}
	seen, err := d.mapping(n, path,
		field{"keys", func(v *yaml.Node, p string) (err error) {
			a.Keys, err = d.strs(v, p, checkSSHKey)
			if err == nil && len(a.Keys) == 0 {
				err = d.errf(v, p, "expected at least one key (a SHA256:… fingerprint or a comment, as ssh-add -l shows them)")
			}
			return err
		}},
	)
	if err == nil {
		err = d.require(n, path, seen, "keys")
	}
	return a, err
}

// checkSSHKey accepts a key's SHA256 fingerprint or its comment.
func checkSSHKey(s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "", errors.New("an empty key name (expected a SHA256:… fingerprint or a comment)")
	}
	if rest, ok := strings.CutPrefix(s, "SHA256:"); ok && (len(rest) != 43 || strings.ContainsAny(rest, "=\n ")) {
		return "", fmt.Errorf("%q is not a SHA256 fingerprint (43 base64 characters after SHA256:, as ssh-add -l prints)", s)
	}
	if strings.HasPrefix(s, "MD5:") {
		return "", fmt.Errorf("%q: name the key by its SHA256 fingerprint (ssh-add -l -E sha256)", s)
	}
	return s, nil
}

func (d *decoder) assumeRole(n *yaml.Node, path string) (*AssumeRole, error) {
	r := &AssumeRole{}
	str := func(check func(string) error, set func(string)) func(*yaml.Node, string) error {
		return func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err == nil {
				if cerr := check(s); cerr != nil {
					return d.errf(v, p, "%v", cerr)
				}
				set(s)
			}
			return err
		}
	}
	seen, err := d.mapping(n, path,
		field{"roleArn", str(func(s string) error {
			if !isRoleARN(s) {
				return fmt.Errorf("%q is not a role ARN (expected arn:aws:iam::ACCOUNT:role/NAME)", s)
			}
			return nil
		}, func(s string) { r.RoleARN = s })},
		field{"sessionPolicy", str(func(s string) error {
			var doc map[string]any
			if json.Unmarshal([]byte(s), &doc) != nil {
				return errors.New("not a JSON policy document (expected {\"Version\": ..., \"Statement\": [...]})")
			}
			if _, ok := doc["Statement"]; !ok {
				return errors.New("the policy document has no Statement")
			}
			return nil
		}, func(s string) { r.SessionPolicy = s })},
		field{"duration", str(func(s string) error {
			t, err := time.ParseDuration(s)
			if err != nil || t < 15*time.Minute || t > 12*time.Hour {
				return fmt.Errorf("%q is not a session duration (expected 15m to 12h, such as 1h)", s)
			}
			r.Duration = t
			return nil
		}, func(string) {})},
		field{"endpoint", str(func(s string) error {
			_, err := checkAPIURL(s)
			return err
		}, func(s string) { r.Endpoint = s })},
		field{"region", str(func(s string) error {
			if !isAWSRegion(s) {
				return fmt.Errorf("%q is not an AWS region (such as eu-west-3)", s)
			}
			return nil
		}, func(s string) { r.Region = s })},
	)
	if err != nil {
		return nil, err
	}
	return r, d.require(n, path, seen, "roleArn")
}

func (d *decoder) inject(n *yaml.Node, path string, needsPlacement bool) (in Inject, err error) {
	seen, err := d.mapping(n, path,
		field{"host", func(v *yaml.Node, p string) error {
			if v.Kind == yaml.ScalarNode {
				h, err := d.host(v, p, checkHostPattern)
				in.Hosts = []string{h}
				return err
			}
			var err error
			in.Hosts, err = d.strs(v, p, checkHostPattern)
			if err == nil && len(in.Hosts) == 0 {
				return d.errf(v, p, "expected at least one host")
			}
			return err
		}},
		field{"header", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if in.Header, err = checkHeader(s); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
		field{"scheme", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if sc := Scheme(s); sc != SchemeBearer && sc != SchemeBasic {
				return d.errf(v, p, "%q is not a scheme (expected bearer or basic)", s)
			}
			in.Scheme = Scheme(s)
			return nil
		}},
		field{"body", func(v *yaml.Node, p string) (err error) {
			in.Body, err = d.boolean(v, p)
			return err
		}},
		field{"ranges", func(v *yaml.Node, p string) (err error) {
			in.Ranges, err = d.boolean(v, p)
			return err
		}},
	)
	if err != nil {
		return in, err
	}
	if err := d.require(n, path, seen, "host"); err != nil {
		return in, err
	}
	switch {
	case !needsPlacement && (seen["header"] != nil || seen["scheme"] != nil || in.Body):
		return in, d.errf(n, path, "an aws credential signs requests: it takes only host (no header, scheme or body)")
	case !needsPlacement:
	case seen["header"] != nil && seen["scheme"] != nil:
		return in, d.errf(n, path, "set header or scheme, not both (scheme uses the Authorization header)")
	case seen["header"] == nil && seen["scheme"] == nil && !in.Body:
		return in, d.errf(n, path, "say where to inject: header, scheme or body: true")
	}
	return in, nil
}
