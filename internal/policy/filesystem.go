package policy

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
)

// The filesystem section: host paths made visible beyond the workspace, and workspace paths hidden
// inside it.

// Filesystem lists host paths made visible beyond the workspace, and workspace paths hidden inside it.
type Filesystem struct {
	// ReadOnly and ReadWrite are absolute host paths (~ already expanded, cleaned) mounted at the same
	// path inside.
	ReadOnly, ReadWrite []string
	// Targets maps a path of ReadOnly or ReadWrite to the absolute path it appears at inside, when
	// that is not its own (cordon run --volume HOST:PATH; the file has no syntax for it yet).
	Targets map[string]string
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

func (d *decoder) filesystem(n *yaml.Node, path string) (fs Filesystem, err error) {
	mount := func(s string) (string, error) { return expandMount(s, d.home) }
	seen, err := d.mapping(n, path,
		field{"readonly", func(v *yaml.Node, p string) (err error) {
			fs.ReadOnly, err = d.strs(v, p, mount)
			return err
		}},
		field{"readwrite", func(v *yaml.Node, p string) (err error) {
			fs.ReadWrite, err = d.strs(v, p, mount)
			return err
		}},
		field{"deny", func(v *yaml.Node, p string) (err error) {
			fs.Deny, err = d.strs(v, p, checkGlob)
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
	return fs, nil
}
