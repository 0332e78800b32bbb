package policy

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The filesystem section: host paths made visible beyond the workspace, and workspace paths hidden
// inside it.

// Filesystem lists host paths made visible beyond the workspace, and workspace paths hidden inside it.
type Filesystem struct {
	// ReadOnly and ReadWrite are absolute host paths (~ already expanded, cleaned) mounted at the same
	// path inside, unless Targets says otherwise.
	ReadOnly, ReadWrite []string
	// Targets maps a path of ReadOnly or ReadWrite to the absolute path it appears at inside, when
	// that is not its own: the entry {path: HOST, at: PATH} in the file, --volume HOST:PATH on the
	// command line. Nil when no path is moved.
	Targets map[string]string
	// Deny are gitignore-like globs relative to the workspace whose matches are masked; see CompileDeny.
	Deny []string
	// Secrets controls the scan for secret-shaped files in the workspace before the agent starts.
	Secrets Secrets
	// Caches names the host's dependency caches (see KnownCaches) shown read-only with a writable
	// layer of the run's own on top, so a second build is fast and what the agent downloads or
	// plants stays in its run. CachesSet says the policy gave the list (an empty one turns caches
	// off); unset, the caches of the network presets named are shown.
	Caches    []string
	CachesSet bool
}

// KnownCaches returns the cache names filesystem.caches accepts, in a fixed order.
func KnownCaches() []string {
	return []string{"go", "npm", "pip", "cargo", "maven"}
}

// PresetCaches maps a network preset to the cache shown by default when it is named.
func PresetCaches() map[string]string {
	return map[string]string{"go": "go", "npm": "npm", "pypi": "pip", "cargo": "cargo", "maven": "maven"}
}

func checkCache(s string) (string, error) {
	if known := KnownCaches(); !slices.Contains(known, s) {
		return "", fmt.Errorf("unknown cache %q (expected one of %s)", s, strings.Join(known, ", "))
	}
	return s, nil
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

func (d *decoder) filesystem(n *yaml.Node, path string) (fs Filesystem, err error) {
	seen, err := d.mapping(n, path,
		field{"readonly", func(v *yaml.Node, p string) (err error) {
			fs.ReadOnly, err = d.mounts(v, p, &fs.Targets)
			return err
		}},
		field{"readwrite", func(v *yaml.Node, p string) (err error) {
			fs.ReadWrite, err = d.mounts(v, p, &fs.Targets)
			return err
		}},
		field{"deny", func(v *yaml.Node, p string) (err error) {
			fs.Deny, err = d.strs(v, p, checkGlob)
			return err
		}},
		field{"caches", func(v *yaml.Node, p string) (err error) {
			fs.Caches, err = d.strs(v, p, checkCache)
			fs.CachesSet = true
			return err
		}},
		field{"secrets", func(v *yaml.Node, p string) error {
			_, err := d.mapping(v, p,
				field{"scan", func(v *yaml.Node, p string) error {
					scan, err := d.boolean(v, p)
					fs.Secrets.NoScan = !scan
					return err
				}},
				field{"allow", func(v *yaml.Node, p string) (err error) {
					fs.Secrets.Allow, err = d.strs(v, p, checkGlob)
					return err
				}},
			)
			return err
		}},
	)
	if err != nil {
		return fs, err
	}
	for i, rw := range fs.ReadWrite {
		if slices.Contains(fs.ReadOnly, rw) {
			return fs, d.errf(seen["readwrite"].Content[i], fmt.Sprintf("%s.readwrite[%d]", path, i),
				"%q is also listed in readonly", rw)
		}
	}
	if err := d.checkTargets(fs, path, seen); err != nil {
		return fs, err
	}
	return fs, nil
}

// mounts decodes filesystem.readonly or readwrite: each entry a host path shown at its own path
// ("~/.gitconfig"), or a mapping {path: HOST, at: PATH} showing it at PATH instead, recorded in
// targets. A path listed twice is refused, whichever form each entry has.
func (d *decoder) mounts(n *yaml.Node, path string, targets *map[string]string) ([]string, error) {
	var out []string
	err := d.list(n, path, func(v *yaml.Node, p string) error {
		host, at, err := d.mount(v, p)
		if err != nil {
			return err
		}
		if slices.Contains(out, host) {
			return d.errf(v, p, "%q is listed twice", host)
		}
		out = append(out, host)
		if at != "" && at != host {
			if *targets == nil {
				*targets = make(map[string]string)
			}
			(*targets)[host] = at
		}
		return nil
	})
	return out, err
}

// mount decodes one entry of mounts, returning the host path and where it appears inside ("" for
// its own path).
func (d *decoder) mount(n *yaml.Node, path string) (host, at string, err error) {
	if n.Kind != yaml.MappingNode {
		s, err := d.str(n, path)
		if err != nil {
			return "", "", err
		}
		if host, err = expandMount(s, d.home); err != nil {
			return "", "", d.errf(n, path, "%v", err)
		}
		return host, "", nil
	}
	seen, err := d.mapping(n, path,
		field{"path", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if host, err = expandMount(s, d.home); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
		field{"at", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if at, err = checkTarget(s); err != nil {
				return d.errf(v, p, "%v", err)
			}
			if ws := d.workspace; ws != "" && (within(at, ws) || within(ws, at)) {
				return d.errf(v, p, "%s is over the workspace %s, whose view is the run's own copy", at, ws)
			}
			return nil
		}},
	)
	if err != nil {
		return "", "", err
	}
	if err := d.require(n, path, seen, "path", "at"); err != nil {
		return "", "", err
	}
	return host, at, nil
}

// checkTarget validates where a mounted path appears inside the sandbox: an absolute path of the
// sandbox's own file system (so ~, which names the host user's home, has no meaning there), never its
// root. Whether it lands on the workspace is checked against Options.Workspace, when known.
func checkTarget(s string) (string, error) {
	switch {
	case s == "":
		return "", errors.New("must not be empty")
	case !filepath.IsAbs(s):
		return "", fmt.Errorf("%q is not absolute (expected the absolute path it appears at inside the sandbox)", s)
	}
	if p := filepath.Clean(s); p != "/" {
		return p, nil
	}
	return "", fmt.Errorf("%q would cover the sandbox's whole file system", s)
}

// checkTargets refuses two paths shown at the same place inside, where one would hide the other.
func (d *decoder) checkTargets(fs Filesystem, path string, seen map[string]*yaml.Node) error {
	at := map[string]string{} // inside path -> host path shown there
	for _, section := range []struct {
		name  string
		paths []string
	}{{"readonly", fs.ReadOnly}, {"readwrite", fs.ReadWrite}} {
		for i, p := range section.paths {
			inside := cmp.Or(fs.Targets[p], p)
			if other, dup := at[inside]; dup {
				n := seen[section.name].Content[i]
				return d.errf(n, fmt.Sprintf("%s.%s[%d]", path, section.name, i),
					"%s would appear at %s, where %s appears already", p, inside, other)
			}
			at[inside] = p
		}
	}
	return nil
}
