// Package hosttool finds the programs cordon itself runs on the host (git for diff, apply and export;
// the tools the presets ask for their configuration) so that none is taken from a directory the agent
// can write. Such a program runs outside every boundary, in the project's directory: one found in the
// project (a virtualenv's bin, a node_modules/.bin) would run what the agent put there.
package hosttool

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Find looks name up as exec.LookPath does, on the PATH of env (the process's own when env holds
// none), skipping relative directories, as LookPath refuses what they give, and every directory
// inside any of the trees in within (the project), symbolic links resolved. The program next on PATH
// is found instead; one found only inside is an error that says so.
func Find(name string, env []string, within ...string) (string, error) {
	if strings.ContainsRune(name, filepath.Separator) {
		return "", fmt.Errorf("hosttool: %q is a path, not a program's name", name)
	}
	pathList, ok := "", false
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, "PATH="); found {
			pathList, ok = v, true
		}
	}
	if !ok {
		pathList = os.Getenv("PATH")
	}
	var trees []string
	for _, t := range within {
		if t == "" {
			continue
		}
		if r, err := filepath.EvalSymlinks(t); err == nil {
			t = r
		}
		trees = append(trees, filepath.Clean(t))
	}
	skipped := ""
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if inside(dir, trees) {
			skipped = p
			continue
		}
		return p, nil
	}
	if skipped != "" {
		return "", fmt.Errorf("%s: found only inside the project (%s), which cordon does not run on the host", name, skipped)
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// inside reports whether dir, its symbolic links resolved, is one of trees or below one.
func inside(dir string, trees []string) bool {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	for _, t := range trees {
		if dir == t || strings.HasPrefix(dir, t+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// SystemPath is the system's own program directories, for a program that has no business anywhere
// else (getent): what System searches.
const SystemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// System finds name in SystemPath alone, whatever the caller's PATH says.
func System(name string) (string, error) {
	return Find(name, []string{"PATH=" + SystemPath})
}
