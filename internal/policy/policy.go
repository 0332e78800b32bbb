// Package policy is cordon's policy file: the one place that says what a sandboxed agent may see, reach
// and use. It owns the schema, strict loading (every mistake is an error naming file:line:column, never
// a silently ignored key), validation, locating the file outside the agent's reach, and rendering the
// effective policy. It is data only: enforcement lives in the packages that consume a *Policy.
package policy

import (
	"fmt"
	"math"
	"slices"

	"go.yaml.in/yaml/v3"
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
	Budgets     []Budget
	// Services are the fixture servers started for the run, in the file's order.
	Services []Service
	// Source is the file the policy was read from, or BuiltinSource.
	Source string
	// SourceSHA256 is the hex SHA-256 of the bytes parsed (empty for the built-in default). A run
	// records it so that cordon policy suggest --write can refuse to edit a file that changed since:
	// a suggestion made against one text must not be spliced into another.
	SourceSHA256 string
}

// Options carries what parsing needs from the caller.
type Options struct {
	// Home is the caller's home directory, for expanding ~ in paths.
	Home string
	// Workspace, when set, is the project the policy is for: a filesystem path shown at a place
	// over it ({path: ..., at: ...}) is refused, as the run refuses it, but with its position.
	Workspace string
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

// policy decodes the document's root: the version, then each section by its own method.
func (d *decoder) policy(root *yaml.Node) (*Policy, error) {
	if root.Kind != yaml.MappingNode {
		return nil, d.errf(root, "", "expected a mapping at the top level, got %s", describe(root))
	}
	// The version decides how to read everything else, so it is checked first.
	v := valueOf(root, "version")
	if v == nil {
		return nil, d.errf(root, "", "version is required (add \"version: %d\" at the top)", CurrentVersion)
	}
	if n, err := d.integer(v, "version", math.MinInt64, math.MaxInt64); err != nil {
		return nil, err
	} else if n != CurrentVersion {
		return nil, d.errf(v, "version", "%d is not supported (this cordon reads version %d)", n, CurrentVersion)
	}

	p := Default()
	seen, err := d.mapping(root, "",
		field{"version", func(*yaml.Node, string) error { return nil }},
		field{"filesystem", func(v *yaml.Node, path string) (err error) {
			p.Filesystem, err = d.filesystem(v, path)
			return err
		}},
		field{"env", func(v *yaml.Node, path string) (err error) {
			p.Env, err = d.env(v, path)
			return err
		}},
		field{"limits", func(v *yaml.Node, path string) (err error) {
			p.Limits, err = d.limits(v, path)
			return err
		}},
		field{"sandbox", func(v *yaml.Node, path string) error { return d.sandbox(v, path, &p.Sandbox) }},
		field{"network", func(v *yaml.Node, path string) (err error) {
			p.Network, err = d.network(v, path)
			return err
		}},
		field{"credentials", func(v *yaml.Node, path string) (err error) {
			p.Credentials, err = d.credentials(v, path)
			return err
		}},
		field{"budgets", func(v *yaml.Node, path string) (err error) {
			p.Budgets, err = d.budgets(v, path)
			return err
		}},
		field{"services", func(v *yaml.Node, path string) (err error) {
			p.Services, err = d.services(v, path)
			return err
		}},
	)
	if err != nil {
		return nil, err
	}
	// A credential's real value must never enter the sandbox through the environment.
	for i, c := range p.Credentials {
		where := "env.pass"
		_, set := p.Env.Set[c.Name]
		if set {
			where = "env.set"
		}
		if set || slices.Contains(p.Env.Pass, c.Name) {
			name := valueOf(seen["credentials"].Content[i], "name")
			return nil, d.errf(name, fmt.Sprintf("credentials[%d].name", i),
				"%s is also named in %s (a credential's value never enters the sandbox's environment)", c.Name, where)
		}
	}
	if len(p.Credentials) > 0 && p.Network == nil {
		return nil, d.errf(seen["credentials"], "credentials",
			"credentials need a network section that allows their hosts (a credential is only used on requests to them)")
	}
	if err := d.checkBudgets(p, seen["budgets"]); err != nil {
		return nil, err
	}
	if err := d.checkServices(p, seen["services"]); err != nil {
		return nil, err
	}
	return p, nil
}
