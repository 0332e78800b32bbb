// Command testsum runs `go test -json` and summarises it for a person: the full output of every
// failing test (and of every package that failed outside a test: a build error, a panic in
// TestMain, a timeout), the skipped tests with their reasons, and a closing line
// "N passed, N failed, N skipped". It exits non-zero when anything failed, including go test
// itself, so that one command line (README's test line, which CI runs) has the right status without
// a shell's pipefail.
//
//	go run ./internal/cmd/testsum -- -count=1 -timeout 30m ./...
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run starts `go test -json ARGS` (ARGS after an optional "--") and summarises its stream to out,
// returning the exit status.
func run(args []string, out, errw io.Writer) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	// go test's own complaints (a bad flag, a package pattern that matches nothing) are not JSON.
	cmd.Stderr = errw
	stream, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(errw, "testsum: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(errw, "testsum: starting go test: %v\n", err)
		return 2
	}
	s, readErr := summarise(stream, out)
	// Drain whatever is left so that go test never blocks on a full pipe, then reap it.
	io.Copy(io.Discard, stream)
	waitErr := cmd.Wait()
	s.write(out)
	switch {
	case readErr != nil:
		fmt.Fprintf(errw, "testsum: reading go test's output: %v\n", readErr)
		return 2
	case waitErr != nil && !s.failedAny():
		// go test failed without a failing test or package in its stream: say so rather than
		// report a clean run.
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			fmt.Fprintf(out, "go test failed (%v) with no failing test in its output; see above\n", waitErr)
			return ee.ExitCode()
		}
		fmt.Fprintf(errw, "testsum: go test: %v\n", waitErr)
		return 2
	case s.failedAny() || waitErr != nil:
		return 1
	}
	return 0
}
