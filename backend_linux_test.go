//go:build linux

package cordon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunscInWritableRefused: a runsc that the sandbox could have written (in a readwrite path or
// the workspace, or reached through a symbolic link there) is refused before cordon executes it:
// asking its version runs it as root on the host. The control is the same script outside, which is
// executed (its version asked) and accepted.
func TestRunscInWritableRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the gVisor tier needs root")
	}
	dir := t.TempDir()
	writable := filepath.Join(dir, "rw")
	outside := filepath.Join(dir, "outside")
	for _, d := range []string{filepath.Join(writable, "bin"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	marker := filepath.Join(dir, "executed")
	script := "#!/bin/sh\ntouch " + marker + "\necho 'runsc version release-20270101.0'\n"
	planted := filepath.Join(writable, "bin", "runsc")
	control := filepath.Join(outside, "runsc")
	for _, p := range []string{planted, control} {
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(outside, "link")
	if err := os.Symlink(filepath.Join(writable, "bin"), link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, runsc, pathEnv string
		viaHome              bool
	}{
		{"sandbox.runsc", planted, "", false},
		{"on PATH", "", filepath.Join(writable, "bin"), false},
		{"through a link", filepath.Join(link, "runsc"), "", false},
		{"HOME/go/bin", "", "/nonexistent", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := ""
			if tc.viaHome {
				// $HOME/go/bin/runsc, with HOME's go/bin the writable directory.
				home = filepath.Join(dir, "home")
				os.MkdirAll(home, 0o755)
				os.Symlink(filepath.Join(writable, "bin"), filepath.Join(home, "go"))
				os.MkdirAll(filepath.Join(writable, "bin", "bin"), 0o755)
				os.WriteFile(filepath.Join(writable, "bin", "bin", "runsc"), []byte(script), 0o755)
			}
			os.Remove(marker)
			_, err := newBackend(IsolationGVisor, tc.runsc, []string{"PATH=" + tc.pathEnv, "HOME=" + home}, []string{writable})
			if err == nil || !strings.Contains(err.Error(), "which the sandbox can write") {
				t.Fatalf("newBackend = %v; want the runsc in %s refused", err, writable)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the planted runsc was executed")
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		os.Remove(marker)
		if _, err := newBackend(IsolationGVisor, control, nil, []string{writable}); err != nil {
			t.Fatalf("newBackend(%s) = %v", control, err)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatal("the control runsc was not asked its version: the test cannot see an execution")
		}
	})
}
