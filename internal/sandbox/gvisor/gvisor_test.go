//go:build linux

package gvisor

import (
	"debug/buildinfo"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/seccomp"
)

func TestVersionDate(t *testing.T) {
	for _, tc := range []struct {
		v, want string
		ok      bool
	}{
		{"v0.0.0-20260905035102-160fafc42237", "20260905", true},
		{"v0.0.0-20250101000000-abcdef123456", "20250101", true},
		{"v1.2.3-pre.0.20260905035102-160fafc42237", "20260905", true},
		{"release-20260905.0", "20260905", true},
		{"release-2026.0", "", false},
		{"VERSION_MISSING", "", false},
		{"(devel)", "", false},
		{"v0.0.0-2026x905035102-160fafc42237", "", false},
	} {
		got, ok := versionDate(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("versionDate(%q) = %q, %v; want %q, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// TestFind: a runsc is found at the given path, else on PATH, else in ~/go/bin; a missing one, a
// directory, and one whose version cannot be told or is too old are refused with how to get one.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	script := func(name, version string) string {
		p := filepath.Join(dir, name, "runsc")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("#!/bin/sh\necho 'runsc version "+version+"'\necho 'spec: 1.2.1'\n"), 0o755)
		return p
	}
	good := script("good", "release-20270101.0")
	old := script("old", "release-20200101.0")
	unknown := script("unknown", "VERSION_MISSING")
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, "go", "bin"), 0o755)
	os.Link(good, filepath.Join(home, "go", "bin", "runsc"))

	for _, tc := range []struct {
		name, path, pathEnv, home, want, err string
	}{
		{"explicit", good, "", "", good, ""},
		{"on PATH", "", "relative:" + filepath.Dir(good), "", good, ""},
		{"go bin", "", "/nonexistent", home, filepath.Join(home, "go", "bin", "runsc"), ""},
		{"missing", "", "/nonexistent", "", "", "runsc not found on PATH"},
		{"a directory", dir, "", "", "", "not an executable file"},
		{"too old", old, "", "", "", "older than " + MinVersion},
		{"no version", unknown, "", "", "", "cannot tell the date"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Find(tc.path, tc.pathEnv, tc.home, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "go install gvisor.dev/gvisor/runsc@") {
					t.Fatalf("Find = %+v, %v; want an error with %q and how to get runsc", r, err, tc.err)
				}
				return
			}
			if err != nil || r.Path != tc.want {
				t.Fatalf("Find = %+v, %v; want %s", r, err, tc.want)
			}
		})
	}
	if p := "/root/go/bin/runsc"; os.Geteuid() == 0 {
		if _, err := os.Stat(p); err == nil {
			// A `go install`ed runsc carries its module version in its build information.
			r, err := Find(p, "", "", nil)
			if err != nil || r.Version != MinVersion && !strings.HasPrefix(r.Version, "v0.0.0-") {
				t.Errorf("Find(%s) = %+v, %v", p, r, err)
			}
		}
	}
}

// TestConfig: the OCI spec carries the command itself, the user without capabilities, the native
// box's seccomp filter (for the policy's nesting choice), the limits, and binds for policy mounts,
// masks and read-only paths.
func TestConfig(t *testing.T) {
	spec := &sandbox.Spec{
		Args: []string{"sh", "-c", "true"}, Env: []string{"PATH=/usr/bin"}, Dir: "/w", Hostname: "box",
		Workspace: sandbox.Workspace{Path: "/w", Source: "/src"},
		Mounts:    []sandbox.Mount{{Source: "/opt/a/b", Writable: true}, {Source: "/opt/x"}},
		Masks:     []string{"/w/.env"},
		ReadOnly:  []string{"/w/.git/hooks", "/w/.git/config"},
		Limits:    sandbox.Limits{OpenFiles: 1024},
	}
	rs := &linux.RuntimeSpec{Spec: spec, Args: []string{"sh", "-c", "true"},
		User: sandbox.User{UID: 1000, GID: 1000, Name: "u", Home: "/home/u"}, Root: "/newroot", Nproc: 64}
	b, err := Config(rs)
	if err != nil {
		t.Fatal(err)
	}
	var got ociSpec
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Process.Args, rs.Args) || got.Process.Cwd != "/w" || got.Hostname != "box" || !got.Process.NoNewPrivileges {
		t.Errorf("process = %+v, hostname %q", got.Process, got.Hostname)
	}
	if got.Process.User.UID != 1000 || len(got.Process.Capabilities.Bounding)+len(got.Process.Capabilities.Effective) != 0 {
		t.Errorf("user %+v, capabilities %+v", got.Process.User, got.Process.Capabilities)
	}
	wantLimits := []ociRlim{{Type: "RLIMIT_CORE"}, {"RLIMIT_NOFILE", 1024, 1024}, {"RLIMIT_NPROC", 64, 64}}
	if !reflect.DeepEqual(got.Process.Rlimits, wantLimits) {
		t.Errorf("rlimits = %+v, want %+v", got.Process.Rlimits, wantLimits)
	}
	var binds []string
	for _, m := range got.Mounts {
		if m.Type == "bind" {
			binds = append(binds, m.Destination+"<"+m.Source+" "+strings.Join(m.Options, ","))
		}
	}
	want := []string{
		"/opt/x</newroot/opt/x rbind,ro,nosuid,nodev",
		"/opt/a/b</newroot/opt/a/b rbind,rw,nosuid,nodev",
		"/w/.env</newroot/w/.env rbind,ro,nosuid,nodev",
		"/w/.git/hooks</newroot/w/.git/hooks rbind,ro,nosuid,nodev",
		"/w/.git/config</newroot/w/.git/config rbind,ro,nosuid,nodev",
	}
	if !reflect.DeepEqual(binds, want) {
		t.Errorf("binds =\n%q\nwant\n%q", binds, want)
	}
	for _, ns := range got.Linux.Namespaces {
		if ns.Type == "network" || ns.Type == "user" {
			t.Errorf("the spec asks for a %s namespace: runsc must stay in the box's", ns.Type)
		}
	}
	filter, err := Seccomp(seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Linux.Seccomp == nil {
		t.Fatal("the spec has no seccomp filter")
	}
	if !reflect.DeepEqual(*got.Linux.Seccomp, *filter) {
		t.Errorf("the spec's seccomp is not the native filter's rendering: %d entries, want %d", len(got.Linux.Seccomp.Syscalls), len(filter.Syscalls))
	}
	spec.AllowNesting = true
	if b, err = Config(rs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"clone3"`) {
		t.Error("with nesting allowed, the spec still refuses clone3")
	}
	if _, err := Config(&linux.RuntimeSpec{Spec: &sandbox.Spec{}}); err == nil {
		t.Error("Config without a command succeeded")
	}
}

// TestFindRefusesReplaceableRunsc: a runsc that its group or others can write, or that a stranger
// owns, is refused before it is executed (cordon runs it as root for the gVisor tier); the control is
// the same script, owned and writable by the caller alone.
func TestFindRefusesReplaceableRunsc(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	body := "#!/bin/sh\ntouch " + ran + "\necho 'runsc version release-20270101.0'\necho 'spec: 1.2.1'\n"
	p := filepath.Join(dir, "runsc")
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(p, "", "", nil); err != nil {
		t.Fatalf("control: %v", err)
	}
	os.Remove(ran)
	cases := []struct {
		name, want string
		mess       func() error
	}{
		{"group writable", "writable by its group or others", func() error { return os.Chmod(p, 0o775) }},
		{"others writable", "writable by its group or others", func() error { return os.Chmod(p, 0o757) }},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, struct {
			name, want string
			mess       func() error
		}{"a stranger's", "neither root nor you", func() error { os.Chmod(p, 0o755); return os.Chown(p, 12345, 12345) }})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.mess(); err != nil {
				t.Fatal(err)
			}
			_, err := Find(p, "", "", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Find = %v, want a refusal saying %q", err, tc.want)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("the replaceable runsc was executed")
			}
		})
	}
}

// TestFindReadsLdflagsVersionWithoutExecuting: a runsc built inside gVisor's own module (as .ci/run
// builds one with precompiled seccomp programs: main module gvisor.dev/gvisor at "(devel)") has its
// version read from the -ldflags -X its build set, without being executed; the binary built here
// fails when executed, so a Find that ran it would fail. Without the -X, the version is asked of the
// binary, which fails.
func TestFindReadsLdflagsVersionWithoutExecuting(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build a stand-in runsc")
	}
	src := t.TempDir()
	files := map[string]string{
		"go.mod":                   "module gvisor.dev/gvisor\n\ngo 1.21\n",
		"runsc/version/version.go": "package version\n\nvar version = \"VERSION_MISSING\"\n\n// V is the version.\nfunc V() string { return version }\n",
		"runsc/main.go":            "package main\n\nimport (\n\t\"os\"\n\n\t\"gvisor.dev/gvisor/runsc/version\"\n)\n\nfunc main() {\n\tos.Stderr.WriteString(\"executed \" + version.V() + \"\\n\")\n\tos.Exit(3)\n}\n",
	}
	for name, body := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := func(out string, ldflags ...string) string {
		t.Helper()
		args := append([]string{"build", "-o", out}, ldflags...)
		cmd := exec.Command(goBin, append(args, "./runsc")...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the stand-in runsc: %v\n%s", err, b)
		}
		return out
	}
	bin := t.TempDir()
	with := build(filepath.Join(bin, "with", "runsc"), "-ldflags=-X gvisor.dev/gvisor/runsc/version.version=release-20270101.0")
	r, err := Find(with, "", "", nil)
	if err != nil || r.Version != "release-20270101.0" {
		t.Fatalf("Find = %+v, %v; want version release-20270101.0 read from the build information", r, err)
	}
	without := build(filepath.Join(bin, "without", "runsc"))
	if r, err := Find(without, "", "", nil); err == nil || !strings.Contains(err.Error(), "cannot tell its version") {
		t.Fatalf("control, no -X: Find = %+v, %v; want the failed execution's error", r, err)
	}
}

// TestLdflagsVersion reads the version as the linker sets it: the last -X of the symbol wins, in
// either form, and a symbol that is not after -X sets nothing.
func TestLdflagsVersion(t *testing.T) {
	bi := func(ldflags string) *buildinfo.BuildInfo {
		return &buildinfo.BuildInfo{Main: debug.Module{Path: "gvisor.dev/gvisor"}, Settings: []debug.BuildSetting{{Key: "-ldflags", Value: ldflags}}}
	}
	for _, tc := range []struct{ ldflags, want string }{
		{"-X " + versionSymbol + "v1", "v1"},
		{`"-X=` + versionSymbol + `v2"`, "v2"},
		{"-X " + versionSymbol + "v1 -s -X " + versionSymbol + "v3", "v3"},
		{versionSymbol + "v4", ""},
		{"-X other.var=v5", ""},
	} {
		if got := ldflagsVersion(bi(tc.ldflags)); got != tc.want {
			t.Errorf("ldflags %q: %q, want %q", tc.ldflags, got, tc.want)
		}
	}
	if got := ldflagsVersion(&buildinfo.BuildInfo{Main: debug.Module{Path: "example.com/other"}, Settings: []debug.BuildSetting{{Key: "-ldflags", Value: "-X " + versionSymbol + "v6"}}}); got != "" {
		t.Errorf("another module's binary: %q", got)
	}
}
