//go:build linux

package gvisor

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// MinVersion is the oldest runsc this tier accepts: the gVisor module version it was built and
// tested against (a pseudo-version of gvisor.dev/gvisor; release builds are named release-DATE.N).
// Older ones may lack what the tier relies on (systrap, --host-uds, --overlay2=none).
const MinVersion = "v0.0.0-20260905035102-160fafc42237"

// minDate is MinVersion's commit date, which release names are compared by.
const minDate = "20260905"

// HowToGet says how to get a runsc, for the one line that names a missing or old one. cordon never
// downloads anything itself.
const HowToGet = "build it with `CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@" + MinVersion + "` (or install a gVisor release) and put it on PATH or name it in sandbox.runsc"

// ErrNotFound says that no runsc was found.
var ErrNotFound = errors.New("runsc not found")

// Runsc is a runsc binary that passed the checks.
type Runsc struct {
	// Path is its absolute path.
	Path string
	// Version is its module version (or release name).
	Version string
}

// Find locates runsc: at path when it is given (sandbox.runsc), else on PATH (the caller's, given
// as pathEnv), else in $HOME/go/bin where `go install` leaves it, and checks its version. When
// trusted is given, the file must pass it before anything runs it (its version is asked by
// executing it, as the caller, root): the caller refuses there a runsc the sandbox could write.
func Find(path, pathEnv, home string, trusted func(string) error) (*Runsc, error) {
	if path == "" {
		for _, dir := range filepath.SplitList(pathEnv) {
			if p := filepath.Join(dir, "runsc"); dir != "" && filepath.IsAbs(dir) && isExec(p) {
				path = p
				break
			}
		}
	}
	if path == "" && home != "" && isExec(filepath.Join(home, "go", "bin", "runsc")) {
		path = filepath.Join(home, "go", "bin", "runsc")
	}
	if path == "" {
		return nil, fmt.Errorf("%w on PATH: %s", ErrNotFound, HowToGet)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if !isExec(abs) {
		return nil, fmt.Errorf("%w at %s (not an executable file): %s", ErrNotFound, abs, HowToGet)
	}
	if err := ownedSafely(abs); err != nil {
		return nil, err
	}
	if trusted != nil {
		if err := trusted(abs); err != nil {
			return nil, err
		}
	}
	v, err := version(abs)
	if err != nil {
		return nil, fmt.Errorf("runsc at %s: %w: %s", abs, err, HowToGet)
	}
	return &Runsc{Path: abs, Version: v}, nil
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// version reads runsc's version from its build information (a `go install`ed runsc carries the
// module version there and prints VERSION_MISSING; one built in gVisor's source tree, as .ci/run
// builds it with precompiled seccomp programs, carries the version its -ldflags set), or from
// `runsc --version` for a release build, and refuses one older than MinVersion. Executing runsc is
// the last resort: it is a 100 MB binary, and its start is on every run's path.
func version(path string) (string, error) {
	var v string
	if bi, err := buildinfo.ReadFile(path); err == nil && bi.Main.Path == "gvisor.dev/gvisor" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	} else if lv := ldflagsVersion(bi); err == nil && lv != "" {
		v = lv
	} else {
		out, err := exec.Command(path, "--version").Output()
		if err != nil {
			return "", fmt.Errorf("cannot tell its version: %w", err)
		}
		first, _, _ := strings.Cut(string(out), "\n")
		v = strings.TrimSpace(strings.TrimPrefix(first, "runsc version "))
	}
	date, ok := versionDate(v)
	if !ok {
		return "", fmt.Errorf("cannot tell the date of its version %q", v)
	}
	if date < minDate {
		return "", fmt.Errorf("version %s is older than %s", v, MinVersion)
	}
	return v, nil
}

// versionSymbol is the variable runsc prints as its version, which a build sets with -ldflags -X.
const versionSymbol = "gvisor.dev/gvisor/runsc/version.version="

// ldflagsVersion is the version a runsc built from gVisor's own module (main module
// gvisor.dev/gvisor, version "(devel)") was given with `-ldflags -X
// gvisor.dev/gvisor/runsc/version.version=V`, which is what `runsc --version` prints; "" if none.
func ldflagsVersion(bi *buildinfo.BuildInfo) string {
	if bi == nil || bi.Main.Path != "gvisor.dev/gvisor" {
		return ""
	}
	// The linker keeps the last -X of a symbol; -X VALUE and -X=VALUE are both its forms.
	version := ""
	for _, s := range bi.Settings {
		if s.Key != "-ldflags" {
			continue
		}
		fields := strings.Fields(s.Value)
		for i, f := range fields {
			var x string
			switch f = strings.Trim(f, `"'`); {
			case (f == "-X" || f == "--X") && i+1 < len(fields):
				x = strings.Trim(fields[i+1], `"'`)
			case strings.HasPrefix(f, "-X="), strings.HasPrefix(f, "--X="):
				_, x, _ = strings.Cut(f, "=")
			default:
				continue
			}
			if v, ok := strings.CutPrefix(x, versionSymbol); ok {
				version = v
			}
		}
	}
	return version
}

// versionDate is the YYYYMMDD date a runsc version names: a pseudo-version's commit time
// (v0.0.0-YYYYMMDDhhmmss-hash) or a release name (release-YYYYMMDD.N).
func versionDate(v string) (string, bool) {
	var d string
	switch {
	case strings.HasPrefix(v, "release-"):
		d, _, _ = strings.Cut(strings.TrimPrefix(v, "release-"), ".")
	case strings.Count(v, "-") >= 2:
		parts := strings.Split(v, "-")
		d = parts[len(parts)-2]
		if i := strings.LastIndex(d, "."); i >= 0 { // vX.Y.Z-pre.0.YYYYMMDD…
			d = d[i+1:]
		}
	}
	if len(d) < 8 {
		return "", false
	}
	d = d[:8]
	for _, c := range d {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return d, true
}

// ownedSafely refuses a runsc binary that someone other than root or the caller could have
// replaced: cordon runs it (runsc --version) before any sandbox exists, as root for the gVisor tier,
// and hands it the box's namespaces. Its file, after links, must be owned by root or the caller and
// writable by neither group nor others. (Where it lies relative to what the sandbox can write is the
// caller's trusted check.)
func ownedSafely(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("runsc %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return fmt.Errorf("runsc %s: %w", real, err)
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("runsc %s is owned by uid %d, neither root nor you: cordon runs it with your rights (as root for the gVisor tier); install one you own", real, st.Uid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("runsc %s is writable by its group or others (mode %04o): anyone who can replace it runs as you when cordon starts it; chmod go-w it", real, st.Mode&0o7777)
	}
	return nil
}
