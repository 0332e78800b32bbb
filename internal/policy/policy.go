// Package policy is cordon's policy file: the one place that says what a sandboxed agent may see, reach
// and use. It owns the schema, strict loading (every mistake is an error naming file:line:column, never
// a silently ignored key), validation, locating the file outside the agent's reach, and rendering the
// effective policy. It is data only: enforcement lives in the packages that consume a *Policy.
package policy

import (
	"fmt"
	"net/netip"
	"time"
)

// CurrentVersion is the only schema version this build understands. A file must say so explicitly, so a
// future incompatible schema is refused instead of being misread.
const CurrentVersion = 1

// BuiltinSource is the Source of the policy returned by Default, shown where a file path would be.
const BuiltinSource = "(built-in default)"

// DefaultHostname is the host name the sandbox sees unless the policy names another.
const DefaultHostname = "cordon"

// MaxFileSize caps the policy file, so a hostile or corrupt file cannot exhaust memory while parsing.
const MaxFileSize = 1 << 20

// Policy is a parsed, validated policy. Zero values mean "nothing granted" or "no limit"; a nil Network
// means no egress at all.
type Policy struct {
	Version     int
	Filesystem  Filesystem
	Env         Env
	Limits      Limits
	Sandbox     Sandbox
	Network     *Network
	Credentials []Credential
	// Source is the file the policy was read from, or BuiltinSource.
	Source string
}

// Filesystem lists host paths made visible beyond the workspace, and workspace paths hidden inside it.
type Filesystem struct {
	// ReadOnly and ReadWrite are absolute host paths (~ already expanded, cleaned) mounted at the same
	// path inside.
	ReadOnly, ReadWrite []string
	// Deny are gitignore-like globs relative to the workspace whose matches are masked; see CompileDeny.
	Deny []string
	// Secrets controls the scan for secret-shaped files in the workspace before the agent starts.
	Secrets Secrets
}

// Secrets controls the workspace's secret scan. By default every secret-shaped file found (an .env, a
// private key, a file holding a token or a production connection string) is masked, because the agent
// reading it by accident is the common way such a secret leaks; Allow is the user's explicit exception.
type Secrets struct {
	// NoScan turns the scan off (secrets: {scan: false}).
	NoScan bool
	// Allow are globs, as in Deny, of files the user lets the agent read although they look secret.
	Allow []string
}

// Env says which variables enter the sandbox's otherwise empty environment.
type Env struct {
	// Pass names variables copied from the caller's environment when set there.
	Pass []string
	// Set gives variables fixed values; it wins over Pass.
	Set map[string]string
}

// Limits bound what the sandbox may consume. Zero means no limit.
type Limits struct {
	Memory    ByteSize
	Pids      int64
	CPU       float64 // CPUs' worth of time: 1.5 is one and a half cores
	Timeout   time.Duration
	OpenFiles uint64
	Disk      ByteSize
}

// Sandbox holds settings of the isolation itself.
type Sandbox struct {
	// AllowNesting permits user namespaces inside, for tools that sandbox themselves.
	AllowNesting bool
	// Hostname is the host name the sandbox sees.
	Hostname string
}

// Network is the egress policy. Hosts are lower-case; a wildcard "*.example.com" matches subdomains
// only, never the apex.
type Network struct {
	// Allow lists the hosts and ports the sandbox may connect to.
	Allow []Endpoint
	// Deny lists host patterns refused even when Allow or a preset would admit them.
	Deny []string
	// Hosts pins names to upstream addresses instead of resolving them.
	Hosts map[string]netip.Addr
	// Presets names bundles of hosts (see KnownPresets) whose expansion is defined elsewhere.
	Presets []string
	DNS     DNS
	TLS     TLS
	// HTTP restricts requests to a host by method and path; it implies TLS interception for that host.
	HTTP []HTTPRule
}

// Endpoint is a host pattern and the TCP ports allowed on it.
type Endpoint struct {
	Host  string
	Ports []uint16
}

// DNS configures how the gateway resolves allowed names.
type DNS struct {
	// Upstream are resolvers to query; empty means the host's resolver configuration.
	Upstream []netip.AddrPort
}

// TLS configures the gateway's upstream TLS connections.
type TLS struct {
	// CAFile is an extra PEM bundle trusted for upstream servers (a corporate CA, a test server).
	CAFile string
	// Inspect lists host patterns whose TLS the gateway terminates only to check that every request's
	// Host or :authority is the name the TLS was for (its SNI). A host that is not intercepted passes
	// through as TLS the gateway cannot read, so a request inside may name any host the upstream
	// serves: domain fronting through a shared front (a CDN). No rules or credentials are needed.
	Inspect []string
	// InspectAll inspects every allowed host that way (written "inspect: all").
	InspectAll bool
}

// InspectAll is how network.tls.inspect is written to inspect every allowed host.
const InspectAll = "all"

// HTTPRule restricts the requests allowed to Host to those matching one of Allow.
type HTTPRule struct {
	Host  string
	Allow []HTTPAllow
}

// HTTPAllow admits requests whose method is one of Methods and whose path matches one of Paths, and
// that ask for nothing else unless it is allowed here: each of the fields below is something a lenient
// upstream may act on beyond the method and path judged.
type HTTPAllow struct {
	Methods []string
	Paths   []string
	// Body allows a request body on GET, HEAD, OPTIONS, DELETE and TRACE (refused otherwise).
	Body bool
	// Websocket allows a websocket upgrade; every other upgrade is refused.
	Websocket bool
	// Headers are method-override and URL-rewrite headers (X-HTTP-Method-Override, X-Original-URL,
	// ...) allowed on these requests; they are refused otherwise.
	Headers []string
}

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

// Options carries what parsing needs from the caller.
type Options struct {
	// Home is the caller's home directory, for expanding ~ in paths.
	Home string
}

// Error is a policy mistake, located in the file so it can be fixed without guessing.
type Error struct {
	File         string
	Line, Column int // 1-based; 0 when the problem has no position (such as the file's size)
	Msg          string
}

// Error formats the error as compilers do, "file:line:column: message", so editors can jump to it.
func (e *Error) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Column == 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// Default returns the policy used when no file exists: the workspace read-write (implicit), no extra
// paths, an empty environment, no network and no credentials.
func Default() *Policy {
	return &Policy{
		Version: CurrentVersion,
		Sandbox: Sandbox{Hostname: DefaultHostname},
		Source:  BuiltinSource,
	}
}
