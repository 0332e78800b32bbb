package cordon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/presets"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// boundSystemDirs are the host directories the sandbox shows at the same path whatever the policy (the
// Linux backend binds them: internal/sandbox/linux/rootfs.go).
var boundSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// locate fills Host and Hidden: where the host has what the sandbox did not find, and which of
// the directories it needs the sandbox does not show. The hint that follows depends on it: a
// directory to add to the PATH, or one to mount.
func (e *ExecError) locate(spec *sandbox.Spec, callerPath string) {
	missing := e.Path
	if e.Interpreter != "" {
		// The interpreter comes from a #! line the agent may have written: print it only as
		// printable text, and never look a path of its choosing up on the host (whether it
		// exists there would be an answer to the agent).
		e.Interpreter = strings.Map(func(r rune) rune {
			if r < ' ' || r == 0x7f {
				return -1
			}
			return r
		}, e.Interpreter)
		if strings.Contains(e.Interpreter, "/") {
			return
		}
		missing = e.Interpreter
	}
	e.Host = hostLookup(missing, callerPath)
	if e.Host == "" {
		return
	}
	dir := filepath.Dir(e.Host)
	if !shownInside(spec, dir) {
		e.Hidden = append(e.Hidden, dir)
	}
	if real, err := filepath.EvalSymlinks(e.Host); err == nil {
		if rdir := filepath.Dir(real); !shownInside(spec, rdir) && !slices.Contains(e.Hidden, rdir) && !within(rdir, dir) {
			e.Hidden = append(e.Hidden, rdir)
		}
	}
	if len(e.Hidden) == 0 && !strings.Contains(missing, "/") && slices.Contains(filepath.SplitList(e.SearchPath), dir) {
		// Shown, in the PATH, and still not found: something hides it that locate does not model
		// (a mask, say); mounting its directory is the fix to suggest.
		e.Hidden = []string{dir}
	}
}

// suggestPreset names the preset that would show the hidden toolchain the command is in, unless the
// run already uses it (used: the policy's network.presets).
func (e *ExecError) suggestPreset(caller, used []string) {
	if len(e.Hidden) == 0 {
		return
	}
	if p := presets.Toolchain(filepath.Dir(e.Host), caller); p != "" && !slices.Contains(used, p) {
		e.Preset = p
	}
}

// hostLookup is where the host has name: the path itself when it has a slash (an absolute one that
// exists), else the first executable file of that name in the caller's PATH; "" when none.
func hostLookup(name, callerPath string) string {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); filepath.IsAbs(name) && err == nil {
			return name
		}
		return ""
	}
	for _, dir := range filepath.SplitList(callerPath) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// shownInside reports whether the host directory dir appears inside the sandbox at the same path:
// under a system directory, the workspace or a mount at its own path, and not masked.
func shownInside(spec *sandbox.Spec, dir string) bool {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	for _, m := range spec.Masks {
		if within(dir, m) {
			return false
		}
	}
	for _, d := range boundSystemDirs {
		if within(dir, d) {
			return true
		}
	}
	if spec.Workspace.Path != "" && within(dir, spec.Workspace.Path) {
		return true
	}
	for _, m := range spec.Mounts {
		if (m.Target == "" || m.Target == m.Source) && within(dir, m.Source) {
			return true
		}
	}
	return false
}
