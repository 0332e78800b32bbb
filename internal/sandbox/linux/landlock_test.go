//go:build linux

package linux

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// TestLandlockAlone attacks Landlock as a layer of its own: a process restricted by restrictLandlock
// but in the host's mount namespace, every host path in view, may still reach only the hierarchies the
// spec names. A child of the test (TestMain runs landlockChild) restricts itself for a workspace and
// then tries to read a secret beside it, to plant a file there and to write into the system
// directories; the same attempts unrestricted are the control.
func TestLandlockAlone(t *testing.T) {
	if LandlockABI() < 1 {
		t.Skip("this kernel has no Landlock")
	}
	// Not under /tmp: the domain lets /tmp through (inside, it is the sandbox's own tmpfs).
	dir, err := os.MkdirTemp("/var/tmp", "cordon-landlock-")
	if err != nil {
		t.Skipf("no directory outside /tmp to test in: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ws := filepath.Join(dir, "workspace")
	other := filepath.Join(dir, "other-repo")
	for _, d := range []string{ws, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(other, "secret"), []byte("s3cr3t"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "file"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(restrict bool) map[string]string {
		t.Helper()
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "CORDON_TEST_LANDLOCK_CHILD="+ws+":"+other+":"+fmt.Sprint(restrict))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the child (restrict %v): %v\n%s", restrict, err, out)
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok {
				got[k] = v
			}
		}
		return got
	}
	// What the domain refuses is refused by it alone: unrestricted, each attempt works (as root the
	// write into /usr too, so it is checked only then). Listing a directory is not among them: the
	// domain lets every directory be listed (programs walk up from their working directory), and
	// only the mount namespace hides what is not the sandbox's.
	control := run(false)
	attacks := []string{"read-beside", "write-beside"}
	if os.Geteuid() == 0 {
		attacks = append(attacks, "write-system")
	}
	for _, a := range attacks {
		if control[a] != "ok" {
			t.Fatalf("control: unrestricted, %s gave %q: the attack would prove nothing\n%v", a, control[a], control)
		}
	}
	got := run(true)
	for _, a := range attacks {
		if got[a] != "EACCES" {
			t.Errorf("restricted, %s gave %q; want EACCES from Landlock", a, got[a])
		}
	}
	for _, a := range []string{"read-workspace", "write-workspace", "read-system"} {
		if got[a] != "ok" {
			t.Errorf("restricted, %s gave %q; want ok (the spec names it)", a, got[a])
		}
	}
}

// landlockChild is TestLandlockAlone's child: arg is "WORKSPACE:BESIDE:RESTRICT". It prints one line
// per attempt: its name and "ok" or the errno's name.
func landlockChild(arg string) {
	parts := strings.Split(arg, ":")
	ws, beside, restrict := parts[0], parts[1], parts[2] == "true"
	// The domain is this thread's (restrictLandlock), and every attempt below runs on it.
	runtime.LockOSThread()
	if restrict {
		spec := &sandbox.Spec{Workspace: sandbox.Workspace{Path: ws, Source: ws}}
		if _, err := restrictLandlock(spec, "", LandlockABI()); err != nil {
			fmt.Println("restrict", err)
			os.Exit(1)
		}
	}
	report := func(name string, err error) {
		switch {
		case err == nil:
			fmt.Println(name, "ok")
		case errors.Is(err, syscall.EACCES):
			fmt.Println(name, "EACCES")
		default:
			fmt.Println(name, strings.ReplaceAll(err.Error(), " ", "_"))
		}
	}
	_, err := os.ReadFile(filepath.Join(beside, "secret"))
	report("read-beside", err)
	err = os.WriteFile(filepath.Join(beside, "planted"), []byte("x"), 0o644)
	report("write-beside", err)
	_, err = os.ReadFile(filepath.Join(ws, "file"))
	report("read-workspace", err)
	err = os.WriteFile(filepath.Join(ws, "new"), []byte("x"), 0o644)
	report("write-workspace", err)
	_, err = os.ReadFile("/usr/bin/env")
	report("read-system", err)
	probe := "/usr/.cordon-landlock-test"
	err = os.WriteFile(probe, []byte("x"), 0o644)
	if err == nil {
		os.Remove(probe)
	}
	report("write-system", err)
	os.Exit(0)
}
