package services

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Binaries are the host programs one kind of service runs, found where its Debian package puts them.
type Binaries struct {
	Kind string
	// Dir is the directory they were found in.
	Dir string
	// Version is what the server says it is ("15.18").
	Version string
	// Major is the part of the version a data directory is bound to ("15"; "7" for redis).
	Major string
	// Progs are the programs found, the server first (for mysql: MariaDB's names or MySQL's).
	Progs []string
	// paths are the programs' own paths where they are not all in Dir (MariaDB's server is in
	// /usr/sbin, its client and installer in /usr/bin).
	paths map[string]string
}

// debianPackage is what to install for a kind whose binaries are missing.
var debianPackage = map[string]string{"postgres": "postgresql", "redis": "redis-server", "mysql": "mariadb-server"}

// required are each kind's programs; the first is the server, whose --version is read.
var required = map[string][]string{
	"postgres": {"postgres", "initdb", "psql", "pg_restore"},
	"redis":    {"redis-server"},
	// MariaDB's names (MySQL's are mysqlNames): server, data directory initialiser, client.
	"mysql": {"mariadbd", "mariadb-install-db", "mariadb"},
}

// Find looks for a kind's programs: PostgreSQL's in the newest /usr/lib/postgresql/N/bin (where
// pg_ctlcluster finds them), then in the directories of path; Redis's in path, then /usr/bin and
// /usr/sbin. A missing program is an error that names the Debian package to install.
func Find(kind, path string) (Binaries, error) {
	var dirs []string
	if kind == "postgres" {
		versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		slices.SortFunc(versions, func(a, b string) int { return majorOf(b) - majorOf(a) })
		dirs = append(dirs, versions...)
	}
	dirs = append(dirs, filepath.SplitList(path)...)
	dirs = append(dirs, "/usr/bin", "/usr/sbin", "/usr/local/bin")
	if kind == "mysql" {
		return findMysql(dirs)
	}
	return findIn(kind, dirs)
}

// findIn is Find over the directories given, in order.
func findIn(kind string, dirs []string) (Binaries, error) {
	progs := required[kind]
	if progs == nil {
		return Binaries{}, fmt.Errorf("unknown kind of service %q", kind)
	}
	for _, d := range dirs {
		if d == "" || !filepath.IsAbs(d) || !allIn(d, progs) {
			continue
		}
		b := Binaries{Kind: kind, Dir: d}
		out, err := exec.Command(filepath.Join(d, progs[0]), "--version").Output()
		if err != nil {
			return Binaries{}, fmt.Errorf("%s --version: %w", filepath.Join(d, progs[0]), err)
		}
		if b.Version = parseVersion(kind, out); b.Version == "" {
			return Binaries{}, fmt.Errorf("%s --version: no version in %q", filepath.Join(d, progs[0]), bytes.TrimSpace(out))
		}
		b.Major, _, _ = strings.Cut(b.Version, ".")
		return b, nil
	}
	return Binaries{}, fmt.Errorf("%s is not installed: %s not found (install the Debian package %s)",
		kind, strings.Join(progs, ", "), debianPackage[kind])
}

// Path is the full path of one of the kind's programs.
func (b Binaries) Path(prog string) string {
	if p, ok := b.paths[prog]; ok {
		return p
	}
	return filepath.Join(b.Dir, prog)
}

func allIn(dir string, progs []string) bool {
	for _, p := range progs {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// parseVersion reads "postgres (PostgreSQL) 15.18 (Debian ...)" or "Redis server v=7.0.15 sha=...".
// (No regular expression: this package is linked into every start of cordon, its init included.)
func parseVersion(kind string, out []byte) string {
	marker := "(PostgreSQL) "
	switch kind {
	case "redis":
		marker = " v="
	case "mysql":
		marker = " Ver "
	}
	_, rest, ok := strings.Cut(string(out), marker)
	if !ok {
		return ""
	}
	end := 0
	for end < len(rest) && (rest[end] >= '0' && rest[end] <= '9' || rest[end] == '.') {
		end++
	}
	v := strings.Trim(rest[:end], ".")
	if v == "" || v[0] < '0' || v[0] > '9' {
		return ""
	}
	return v
}

// Kinds are the kinds of service this cordon can start, for cordon doctor.
func Kinds() []string { return []string{"postgres", "redis", "mysql"} }
