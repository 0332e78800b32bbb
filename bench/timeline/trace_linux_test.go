//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTracedBuildMarksBothProcesses builds cordon with the cordontrace tag, as the tool's doc says,
// starts one real sandbox with it and checks that the marks of both processes arrive in the order
// the tool reads them, so that neither the tag nor the marks rot unseen.
func TestTracedBuildMarksBothProcesses(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "cordon-trace")
	build := exec.Command("go", "build", "-tags", "cordontrace", "-o", bin, "../../cmd/cordon")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cordon with -tags cordontrace: %v\n%s", err, out)
	}
	project := filepath.Join(dir, "project")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--workspace", project, "--allow", "example.test", "--", "true")
	cmd.Dir = project
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(dir, "state"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cordon run: %v\n%s", err, stderr.Bytes())
	}
	r, err := parse(stderr.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.Bytes())
	}
	got := summarize([]run{r})
	// Init's locked thread and cordon, in sequence; and init's preparing goroutine, which runs beside
	// the thread's steps (in parallel with the gateway's second processor) and is ordered against the
	// thread only where the thread joins it: the config before the root is built, the filter before
	// it is installed.
	chains := [][]string{
		{"cordon main", "cordon launch", "init   main", "init   sockets sent", "init   base of the root", "init   config joined",
			"init   rules installed", "init   landlock", "init   command started", "cordon started", "cordon finished", "cordon exit"},
		{"init   main", "init   config read", "init   config joined"},
		{"init   config read", "init   filter compiled", "init   seccomp"},
	}
	for _, order := range chains {
		last := -1.0
		for _, step := range order {
			st, ok := got[step]
			if !ok {
				t.Fatalf("no mark %q in\n%s", step, stderr.Bytes())
			}
			if st.at[0] < last {
				t.Errorf("%q at %.2f ms, before the step listed ahead of it (%.2f ms)", step, st.at[0], last)
			}
			last = st.at[0]
		}
	}
}
